"""ndjson-ingest: one batch's items streamed to ``POST /api/v1/batches/{id}/items``.

``fairlane serve`` runs as a process of its own on a free loopback port. The batch is created
over the API (the batch settings raised first so it may hold ``--items``); then its items, each
an NDJSON line of ``--item-bytes`` (default 1 KiB, newline included), go up as one chunked
request body made by a generator, 64 KiB at a time: neither side ever holds the whole body.
``items_per_s`` is the item count over the time from the first byte sent until the answer
(every item stored, the batch sealed). The server's resident memory (``VmRSS``) is sampled
every 50 ms: ``rss_start_mib`` before the stream, the peak and the end, and one sample each
time another tenth of the items has been sent (``rss_mib_by_tenth``). Memory is flat when the
peak stays put as ``--items`` grows (compare 100,000 with 1,000,000). No worker runs: the
carriers stay queued.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg

from fairlane.batches import AsyncBatchClient
from fairlane.tools.bench.batch import prepare
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, server_url
from fairlane.tools.bench.server import MemorySampler, api_key, httpx_module, rss_bytes, serve

TASK = "bench.noop"
ENVIRONMENT = "bench"
CHUNK_BYTES = 64 * 1024
PADDING = b"x" * 1024 * 1024


def item_line(index: int, size: int) -> bytes:
    """One NDJSON item of exactly ``size`` bytes (its newline included, when it fits)."""
    head = b'{"task":"%s","index":%d,"payload":{"i":%d,"pad":"' % (TASK.encode(), index, index)
    tail = b'"}}\n'
    return head + PADDING[: max(0, size - len(head) - len(tail))] + tail


def body(items: int, size: int, marks: list[int], pid: int) -> Iterator[bytes]:
    """The request body in chunks of about ``CHUNK_BYTES``; at each tenth of the items sent,
    the server's RSS goes into ``marks``."""
    tenth = max(1, items // 10)
    pending: list[bytes] = []
    held = 0
    for index in range(items):
        line = item_line(index, size)
        pending.append(line)
        held += len(line)
        if held >= CHUNK_BYTES:
            yield b"".join(pending)
            pending, held = [], 0
        if (index + 1) % tenth == 0:
            marks.append(rss_bytes(pid))
    if pending:
        yield b"".join(pending)


async def _allow(dsn: str, items: int) -> None:
    """Room for one batch of ``items``: the environment's bucket holds that many tokens."""
    async with AsyncBatchClient(dsn, schema=SCHEMA) as batches:
        await batches.set_limits(ENVIRONMENT, bucket_max=items, refill_amount=items)


def stream(url: str, key: str, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    httpx = httpx_module()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(600.0)) as client:
        created = client.post("/api/v1/batches", json={"run_count": args.items})
        if created.status_code != 201:
            raise SystemExit(f"creating the batch answered {created.status_code}: {created.text}")
        batch_id = created.json()["id"]
        marks: list[int] = []
        with MemorySampler(pid) as memory:
            started = time.perf_counter()
            answer = client.post(
                f"/api/v1/batches/{batch_id}/items",
                content=body(args.items, args.item_bytes, marks, pid),
                headers={"Content-Type": "application/x-ndjson"},
            )
            seconds = time.perf_counter() - started
    if answer.status_code != 200:
        raise SystemExit(f"the items answered {answer.status_code}: {answer.text}")
    result: dict[str, Any] = answer.json()
    return {
        "batch_id": batch_id,
        "seconds": seconds,
        "answer": result,
        **memory.figures(),
        "rss_mib_by_tenth": [round(mark / 2**20, 1) for mark in marks],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "ndjson_ingest", keep=args.keep_db) as dsn:
        prepare(dsn, args.items)
        anyio.run(_allow, dsn, args.items)
        key = api_key(dsn, ENVIRONMENT)
        with serve(dsn) as server:
            measured = stream(server.url, key, args, server.pid)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {SCHEMA}.batch_items WHERE batch_id = %s",
                (measured["batch_id"],),
            ).fetchone()
    stored = int(row[0]) if row else 0
    answer = measured.pop("answer")
    seconds = measured.pop("seconds")
    n = args.items
    return {
        "scenario": "ndjson-ingest",
        "items": n,
        "item_bytes": args.item_bytes,
        "items_per_s": round(n / seconds),
        "mib_per_s": round(n * args.item_bytes / seconds / 2**20, 2),
        "seconds": round(seconds, 3),
        **{k: v for k, v in measured.items() if k != "batch_id"},
        "sealed": answer.get("sealed"),
        "ok": answer.get("sealed") is True and stored == n and answer.get("accepted") == n,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "ndjson-ingest",
        parents=[common],
        help="stream a batch's items as one chunked NDJSON request: items/s, server RSS",
    )
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--item-bytes", type=int, default=1024, help="bytes per NDJSON line")
    p.set_defaults(func=main)
