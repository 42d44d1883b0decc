"""rate: a global rate limit holds however many workers claim.

``set_scheduler(rate_limit_per_s=--rate, rate_burst=--burst)`` (the burst defaults to one
second's worth), then ``--runs`` no-op runs are bulk-queued and ``--workers`` Worker objects
(each ``--concurrency``, polling every ``--poll-interval`` s when a claim comes back short) drain
them. Timed from starting the workers until the database shows every run COMPLETED; the ideal
is (runs - burst) / rate. ``max_starts_in_1s`` is the most handler starts in any one-second
window, which shows whether the limit ever let more through than rate + burst.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import psycopg

from fairlane.limits import set_scheduler
from fairlane.tools.bench.common import (
    SCHEMA,
    count_statuses,
    emit,
    fresh_database,
    run_async,
    server_url,
)
from fairlane.tools.bench.drain import TIMEOUT_S, wait_all_done
from fairlane.tools.bench.enqueue import BATCH, TASK, open_client, trigger_bulk
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most timestamps falling in any half-open interval of ``window`` seconds."""
    ordered = sorted(times)
    best = lo = 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


async def _rate(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    client = await open_client(dsn)
    async with client:
        await trigger_bulk(client, args.runs, BATCH)
    starts: list[float] = []
    everything = anyio.Event()
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def noop(ctx: RunContext, payload: Any) -> None:
        starts.append(time.perf_counter())
        if len(starts) >= args.runs:
            everything.set()

    options: dict[str, Any] = {
        "schema": SCHEMA,
        "concurrency": args.concurrency,
        "poll_interval": args.poll_interval,
        "shutdown_grace": 5.0,
    }
    workers = [Worker(tasks, dsn, **options) for _ in range(args.workers)]
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with probe, anyio.create_task_group() as group:
        started = time.perf_counter()
        for worker in workers:
            await group.start(worker.run)
        with anyio.fail_after(TIMEOUT_S):
            await everything.wait()
            done = await wait_all_done(probe)
        for worker in workers:
            worker.stop()
    return {
        "seconds": done - started,
        "first_to_last_start_s": max(starts) - min(starts),
        "max_starts_in_1s": max_in_window(starts),
        "claims": sum(worker.stats.claims for worker in workers),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "rate", keep=args.keep_db) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            settings = set_scheduler(
                conn, rate_limit_per_s=args.rate, rate_burst=args.burst, schema=SCHEMA
            )
        timing = run_async(_rate, dsn, args, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed = count_statuses(conn).get("COMPLETED", 0)
    burst = settings.rate_burst if settings.rate_burst is not None else args.rate
    return {
        "scenario": "rate",
        "loop": loop_name(args.loop),
        "runs": args.runs,
        "rate_limit_per_s": args.rate,
        "rate_burst": burst,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "poll_interval": args.poll_interval,
        "seconds": round(timing["seconds"], 3),
        "expected_s": round(args.runs / args.rate, 3),
        "runs_per_s": round(args.runs / timing["seconds"], 2),
        "first_to_last_start_s": round(timing["first_to_last_start_s"], 3),
        "max_starts_in_1s": timing["max_starts_in_1s"],
        "claims": timing["claims"],
        "ok": completed == args.runs,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("rate", parents=[common], help="drain under a global rate limit")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--rate", type=float, default=50.0, help="rate_limit_per_s")
    p.add_argument("--burst", type=float, help="rate_burst (default: one second's worth)")
    p.add_argument("--workers", type=int, default=1, help="Worker objects in the process")
    p.add_argument("--concurrency", type=int, default=10, help="per worker")
    p.add_argument("--poll-interval", type=float, default=0.05, help="per worker")
    p.set_defaults(func=main)
