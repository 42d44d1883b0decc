"""latency: an idle worker; runs triggered one by one on a fixed schedule.

Each payload carries ``time.time()`` taken just before the trigger call, so the figure
includes the trigger's own commit, the notification and the claim; the handler records
now minus that. Like the peer harness: 1 s idle, 5 warm-up runs discarded, then ``--runs``
triggers ``--gap-ms`` apart; interpolated percentiles.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient
from fairlane.tools.bench.common import (
    SCHEMA,
    count_statuses,
    emit,
    fresh_database,
    latency_figures,
    run_async,
    server_url,
)
from fairlane.tools.bench.enqueue import open_client
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

TASK = "latency"
WARMUP = 5


async def paced(client: AsyncClient, runs: int, gap_s: float) -> None:
    """Trigger ``runs`` runs on a fixed schedule ``gap_s`` apart."""
    start = time.perf_counter()
    for i in range(runs):
        delay = start + i * gap_s - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        await client.trigger(TASK, {"t": time.time()})


async def _latency(dsn: str, args: argparse.Namespace) -> list[float]:
    seen: list[float] = []
    everything = anyio.Event()
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def record(ctx: RunContext, payload: dict[str, float]) -> None:
        seen.append(time.time() - payload["t"])
        if len(seen) >= WARMUP + args.runs:
            everything.set()

    worker = Worker(tasks, dsn, schema=SCHEMA, concurrency=args.concurrency, shutdown_grace=5.0)
    client = await open_client(dsn)
    async with client, anyio.create_task_group() as group:
        await group.start(worker.run)
        await anyio.sleep(1.0)  # let the worker go idle on LISTEN
        await paced(client, WARMUP, 0.05)
        await anyio.sleep(0.5)
        await paced(client, args.runs, args.gap_ms / 1000)
        with anyio.fail_after(30):
            await everything.wait()
        worker.stop()
    return seen[WARMUP:]


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "latency", keep=args.keep_db) as dsn:
        seconds = run_async(_latency, dsn, args, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed = count_statuses(conn).get("COMPLETED", 0)
    ms = [s * 1000 for s in seconds]
    return {
        "scenario": "latency",
        "loop": loop_name(args.loop),
        "runs": len(ms),
        "concurrency": args.concurrency,
        "gap_ms": args.gap_ms,
        **latency_figures(ms, (50, 95, 99), 2),
        "ok": len(ms) == args.runs and completed == WARMUP + args.runs,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("latency", parents=[common], help="trigger-to-handler latency")
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--gap-ms", type=float, default=20.0, help="time between triggers")
    p.set_defaults(func=main)
