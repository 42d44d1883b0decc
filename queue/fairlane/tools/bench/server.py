"""The HTTP benchmarks' server: ``fairlane serve`` as a process of its own on a free loopback
port (so the client's work and the server's are measured apart, and the server's memory can be
read from ``/proc``), an API key to call it with, and its resident memory sampled meanwhile."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from fairlane.tools.bench.common import SCHEMA
from fairlane.web.keys import create_key

START_TIMEOUT_S = 30.0
SAMPLE_EVERY_S = 0.05


def httpx_module() -> Any:
    """httpx, the benchmarks' HTTP client (the dev extra installs it)."""
    try:
        import httpx
    except ModuleNotFoundError:
        raise SystemExit("the HTTP benchmarks need httpx: pip install httpx") from None
    # Not a log line per request on stderr.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def api_key(dsn: str, environment: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return create_key(conn, environment, name="bench", schema=SCHEMA)[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def serve(dsn: str, *, pool_size: int = 4) -> Iterator[Server]:
    """``fairlane serve`` for ``dsn``; yields once it answers, stops it (SIGINT) afterwards."""
    httpx = httpx_module()
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "fairlane.cli",
        "serve",
        "--schema",
        SCHEMA,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--pool-size",
        str(pool_size),
        "--log-level",
        "warning",
    ]
    # The DSN goes through the environment, not the command line other users can read.
    environment = {**os.environ, "DATABASE_URL": dsn}
    # Whatever the server prints goes to stderr: stdout is the benchmark's one JSON line.
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=2, env=environment)
    server = Server(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise SystemExit(f"fairlane serve exited with status {process.returncode}")
            try:
                if httpx.get(server.url + "/api/v1/openapi.json", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"fairlane serve did not answer within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.05)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def rss_bytes(pid: int) -> int:
    """A process's resident set size now (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class MemorySampler:
    """Samples a process's RSS every ``SAMPLE_EVERY_S`` on a thread of its own."""

    pid: int
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> MemorySampler:
        self.samples.append(rss_bytes(self.pid))
        self._thread = threading.Thread(target=self._sample, name="rss sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self.samples.append(rss_bytes(self.pid))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(rss_bytes(self.pid))

    def figures(self) -> dict[str, float]:
        """Start, peak and end in MiB."""
        mib = 2**20
        return {
            "rss_start_mib": round(self.samples[0] / mib, 1),
            "rss_peak_mib": round(max(self.samples) / mib, 1),
            "rss_end_mib": round(self.samples[-1] / mib, 1),
        }
