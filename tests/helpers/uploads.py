"""Uploads as a hostile client sends them: ``fairlane serve`` in a process of its own, and
NDJSON uploads over raw sockets that send part of a body, then nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import SocketStream

from fairlane.batches.ingest import SLICE_BYTES
from tests.helpers.serve import serve

# A line whose payload alone fills a slice: the server stores it as soon as it has read it, so
# the batch's ``received`` shows that the upload is in and waiting on its client.
SLICE_FILLING_PAYLOAD = "x" * SLICE_BYTES
PARTIAL_LINE = b'{"task": "sink", "payload": "never finish'


@dataclass(frozen=True)
class Server:
    base: str
    port: int
    log: Path


@contextmanager
def served(dsn: str, folder: Path, *options: str) -> Iterator[Server]:
    """``fairlane serve`` with ``options`` on a free loopback port, until the block ends."""
    log = folder / f"serve-{len(list(folder.glob('serve-*.log')))}.log"
    with serve(dsn, *options, log=log) as server:
        yield Server(server.url, server.port, log)


def logged_errors(server: Server) -> list[str]:
    """The lines of the server's log (warnings and worse) that report an error."""
    return [line for line in server.log.read_text().splitlines() if "ERROR" in line]


def lines(items: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


async def start_upload(server: Server, key: str, batch_id: int, body: bytes) -> SocketStream:
    """An upload of ``body`` (chunked) that never sends its last chunk: the socket, open."""
    stream = await anyio.connect_tcp("127.0.0.1", server.port)
    head = (
        f"POST /api/v1/batches/{batch_id}/items HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/x-ndjson\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    await stream.send(head.encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n")
    return stream


async def read_answer(stream: SocketStream) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the answer that comes on ``stream``."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += await stream.receive()
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    return status, json.loads(body[:length])


async def create_batch(client: httpx.AsyncClient, key: str, run_count: int) -> int:
    made = await client.post("/api/v1/batches", json={"run_count": run_count}, headers=bearer(key))
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
