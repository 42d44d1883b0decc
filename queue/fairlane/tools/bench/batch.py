"""batch: ingest one NDJSON batch of N items (default 10,000), then drain it with one worker.

The batch settings are raised for the run (``batch_max_items`` and the environment's token
bucket to N, its batch concurrency to ``--batch-concurrency``). The NDJSON is built in memory
and streamed in 64 KiB chunks. ``ingest_items_per_s`` times phase two alone (parse, slice,
insert items and carrier runs, seal); ``runs_per_s`` times from the worker's start until the
batch is complete and every run it made is COMPLETED (each item runs twice: its carrier, then
its own no-op run).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg

from fairlane.batches import AsyncBatchClient
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, run_async, server_url
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

log = logging.getLogger("fairlane.tools.bench")

TASK = "bench.noop"
ENVIRONMENT = "bench"
CHUNK_BYTES = 64 * 1024
TIMEOUT_S = 280.0
POLL_S = 0.01


def ndjson(items: int) -> bytes:
    return b"".join(
        json.dumps({"task": TASK, "payload": {"i": i}, "index": i}).encode() + b"\n"
        for i in range(items)
    )


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start : start + CHUNK_BYTES]


def prepare(dsn: str, items: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {SCHEMA}.settings SET value = %s::jsonb WHERE name = 'batch_max_items'",
            (json.dumps(items),),
        )


async def _bench(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    data = ndjson(args.items)
    async with AsyncBatchClient(dsn, schema=SCHEMA) as batches:
        await batches.set_limits(
            ENVIRONMENT,
            bucket_max=args.items,
            refill_amount=args.items,
            concurrency=args.batch_concurrency,
        )
        batch = await batches.create(ENVIRONMENT, args.items)
        started = time.perf_counter()
        ingested = await batches.ingest(batch.id, chunks(data))
        ingest_s = time.perf_counter() - started
        log.info("%d items ingested in %.2fs (sealed: %s)", args.items, ingest_s, ingested.sealed)
        tasks = TaskRegistry()

        @tasks.task(TASK)
        async def noop(ctx: RunContext, payload: Any) -> None:
            return None

        worker = Worker(
            tasks,
            dsn,
            schema=SCHEMA,
            concurrency=args.concurrency,
            shutdown_grace=5.0,
        )
        probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        pending = (
            f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.runs "
            "WHERE status IN ('QUEUED', 'EXECUTING', 'DELAYED'))"
        )
        async with probe, anyio.create_task_group() as group:
            started = time.perf_counter()
            await group.start(worker.run)
            with anyio.fail_after(TIMEOUT_S):
                while True:
                    cursor = await probe.execute(pending)
                    row = await cursor.fetchone()
                    if row is not None and not row[0]:
                        break
                    await anyio.sleep(POLL_S)
            done = time.perf_counter()
            worker.stop()
        final = await batches.get(batch.id)
    return {
        "ingest_s": ingest_s,
        "drain_s": done - started,
        "sealed": ingested.sealed,
        "status": final.status,
        "succeeded": final.succeeded,
        "failed": final.failed,
        "bytes": len(data),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "batch", keep=args.keep_db) as dsn:
        prepare(dsn, args.items)
        timing = run_async(_bench, dsn, args, loop=args.loop)
    n = args.items
    return {
        "scenario": "batch",
        "loop": loop_name(args.loop),
        "items": n,
        "concurrency": args.concurrency,
        "batch_concurrency": args.batch_concurrency,
        "ingest_items_per_s": round(n / timing["ingest_s"]),
        "ingest_mib_per_s": round(timing["bytes"] / timing["ingest_s"] / 2**20, 2),
        "runs_per_s": round(n / timing["drain_s"]),
        "ingest_s": round(timing["ingest_s"], 3),
        "drain_s": round(timing["drain_s"], 3),
        "status": timing["status"],
        "ok": timing["status"] == "COMPLETED" and timing["succeeded"] == n,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "batch", parents=[common], help="ingest a 10,000-item NDJSON batch, then drain it"
    )
    p.add_argument("--items", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=50, help="the worker's concurrency")
    p.add_argument(
        "--batch-concurrency",
        type=int,
        default=50,
        help="the environment's batch concurrency (items turned into runs at once)",
    )
    p.set_defaults(func=main)
