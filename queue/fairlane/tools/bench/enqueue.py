"""enqueue: bulk-trigger N no-op runs, 1000 per ``Client.trigger_many`` call."""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient
from fairlane.errors import RunNotFoundError
from fairlane.tools.bench.common import (
    SCHEMA,
    count_statuses,
    emit,
    fresh_database,
    run_async,
    server_url,
)
from fairlane.triggering.request import TriggerRequest
from fairlane.worker.process import loop_name

TASK = "noop"
BATCH = 1000


async def open_client(dsn: str) -> AsyncClient:
    """A client whose connection is already open, so timings leave the connect out."""
    client = AsyncClient(dsn, schema=SCHEMA)
    with contextlib.suppress(RunNotFoundError):
        await client.get_run(0)
    return client


async def trigger_bulk(client: AsyncClient, runs: int, batch: int = BATCH) -> float:
    """Trigger ``runs`` no-op runs in calls of ``batch``; returns the wall time in seconds."""
    started = time.perf_counter()
    for offset in range(0, runs, batch):
        size = min(batch, runs - offset)
        await client.trigger_many([TriggerRequest(TASK) for _ in range(size)])
    return time.perf_counter() - started


async def _enqueue(dsn: str, runs: int, batch: int, producers: int) -> float:
    """``producers`` clients, each on its own connection, share the batches."""
    clients = [await open_client(dsn) for _ in range(producers)]
    shares = [runs // producers + (1 if i < runs % producers else 0) for i in range(producers)]
    try:
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for client, share in zip(clients, shares, strict=True):
                group.start_soon(trigger_bulk, client, share, batch)
        return time.perf_counter() - started
    finally:
        for client in clients:
            await client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "enqueue", keep=args.keep_db) as dsn:
        seconds = run_async(_enqueue, dsn, args.runs, args.batch, args.concurrency, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            queued = count_statuses(conn).get("QUEUED", 0)
    return {
        "scenario": "enqueue",
        "loop": loop_name(args.loop),
        "runs": args.runs,
        "runs_per_s": round(args.runs / seconds),
        "concurrency": args.concurrency,
        "batch": args.batch,
        "seconds": round(seconds, 3),
        "ok": queued == args.runs,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("enqueue", parents=[common], help="bulk trigger throughput")
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument(
        "--concurrency", type=int, default=1, help="producers, each on its own connection"
    )
    p.add_argument("--batch", type=int, default=BATCH, help="runs per trigger_many call")
    p.set_defaults(func=main)
