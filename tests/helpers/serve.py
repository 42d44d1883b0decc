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

import httpx


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(dsn: str, *options: str) -> Iterator[Served]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairlane.cli",
            "serve",
            "--dsn",
            dsn,
            "--port",
            str(port),
            "--log-level",
            "warning",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
                assert process.poll() is None, "fairlane serve exited"
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
