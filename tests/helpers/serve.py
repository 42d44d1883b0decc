"""``fairlane serve`` in a process of its own, on the test's database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(dsn: str, *options: str, log: Path | None = None) -> Iterator[Served]:
    """``fairlane serve`` at warning level (``options`` come after, so they may say otherwise)
    on a free loopback port, until the block ends. Its output goes to ``log`` when given."""
    port = free_port()
    command = ["serve", "--dsn", dsn, "--port", str(port), "--log-level", "warning", *options]
    with log.open("wb") if log is not None else open(os.devnull, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "fairlane.cli", *command],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/api/v1/openapi.json", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                said = f": {log.read_text()}" if log is not None else ""
                assert process.poll() is None, f"fairlane serve exited{said}"
                assert time.monotonic() < deadline, "fairlane serve did not answer"
                time.sleep(0.1)
        yield Served(base, process)
    finally:
        process.terminate()
        process.wait(timeout=20)


def rss_bytes(pid: int) -> int:
    """A process's resident memory (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
