"""fairness: one environment floods the queue, three small ones arrive just behind it.

A worker (concurrency 20, a handler that sleeps 2 ms) is started and left idle for 1 s. Then
environment A bulk-triggers ``--big`` runs (1000 per ``trigger_many`` call), and B, C and D
``--small`` runs each, back to back. Every handler call records when it started and when it
returned.

* ``first_start_s``: from the return of an environment's first trigger call (its first runs
  are visible) to its first handler start.
* ``drain_s``: from the return of its last trigger call (the peer harness's "return of its
  enqueue call") to its last handler return.
* ``jain_index``: Jain's fairness index over the four environments' handler starts per second
  in the window while all four have work: from the return of D's trigger call until the first
  environment starts its last run. 1.0 is a perfectly even split; 0.25 is one taking everything.
* ``a_done_when_bcd_drained``: A's runs done when the last of B, C and D's runs was done.
* ``runs_per_s``: all runs divided by the time from the first trigger call to the last return.
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
    run_async,
    server_url,
)
from fairlane.tools.bench.drain import TIMEOUT_S, wait_all_done
from fairlane.tools.bench.enqueue import BATCH, open_client
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

TASK = "fair"
BIG = "A"
SMALL = ("B", "C", "D")
ENVIRONMENTS = (BIG, *SMALL)


def jain(values: list[float]) -> float | None:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1.0 when all are equal."""
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


class Timeline:
    """Per environment: trigger times, handler start and end times."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.total = sum(sizes.values())
        self.first_trigger: dict[str, float] = {}
        self.last_trigger: dict[str, float] = {}
        self.starts: dict[str, list[float]] = {env: [] for env in sizes}
        self.ends: dict[str, list[float]] = {env: [] for env in sizes}
        self.finished = 0
        self.done = anyio.Event()

    def start(self, env: str) -> None:
        self.starts[env].append(time.perf_counter())

    def end(self, env: str) -> None:
        self.ends[env].append(time.perf_counter())
        self.finished += 1
        if self.finished >= self.total:
            self.done.set()

    def window(self) -> tuple[float, float]:
        """While all have work: every trigger returned, until one starts its last run."""
        opened = max(self.last_trigger.values())
        closed = min(max(starts) for starts in self.starts.values())
        return opened, closed

    def result(self) -> dict[str, Any]:
        opened, closed = self.window()
        span = closed - opened
        rates = {
            env: sum(1 for t in starts if opened <= t <= closed) / span if span > 0 else 0.0
            for env, starts in self.starts.items()
        }
        bcd_drained = max(max(self.ends[env]) for env in SMALL)
        first_trigger = min(self.first_trigger.values())
        last_end = max(max(ends) for ends in self.ends.values())
        index = jain(list(rates.values()))
        return {
            "jain_index": None if index is None else round(index, 4),
            "window_s": round(span, 3),
            "window_runs_per_s": {env: round(rate) for env, rate in rates.items()},
            "first_start_s": {
                env: round(min(self.starts[env]) - self.first_trigger[env], 4) for env in self.sizes
            },
            "drain_s": {
                env: round(max(self.ends[env]) - self.last_trigger[env], 3) for env in self.sizes
            },
            "runs_per_s": round(self.total / (last_end - first_trigger)),
            "a_done_when_bcd_drained": sum(1 for t in self.ends[BIG] if t <= bcd_drained),
        }


async def trigger_environment(client: AsyncClient, timeline: Timeline, env: str) -> None:
    runs = timeline.sizes[env]
    for offset in range(0, runs, BATCH):
        size = min(BATCH, runs - offset)
        await client.trigger_many(
            [TriggerRequest(TASK, {"env": env}, environment=env) for _ in range(size)]
        )
        if env not in timeline.first_trigger:
            timeline.first_trigger[env] = time.perf_counter()
    timeline.last_trigger[env] = time.perf_counter()


async def _fairness(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    sizes = {BIG: args.big, **{env: args.small for env in SMALL}}
    timeline = Timeline(sizes)
    sleep_s = args.sleep_ms / 1000
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def handler(ctx: RunContext, payload: dict[str, str]) -> None:
        timeline.start(payload["env"])
        await anyio.sleep(sleep_s)
        timeline.end(payload["env"])

    worker = Worker(
        tasks,
        dsn,
        schema=SCHEMA,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        shutdown_grace=5.0,
    )
    client = await open_client(dsn)
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with client, probe, anyio.create_task_group() as group:
        await group.start(worker.run)
        await anyio.sleep(1.0)  # let the worker go idle on LISTEN
        for env in ENVIRONMENTS:
            await trigger_environment(client, timeline, env)
        with anyio.fail_after(TIMEOUT_S):
            await timeline.done.wait()
            await wait_all_done(probe)
        worker.stop()
    return timeline.result()


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "fairness", keep=args.keep_db) as dsn:
        figures = run_async(_fairness, dsn, args, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed = count_statuses(conn).get("COMPLETED", 0)
    total = args.big + len(SMALL) * args.small
    return {
        "scenario": "fairness",
        "loop": loop_name(args.loop),
        "runs": {BIG: args.big, **{env: args.small for env in SMALL}},
        "concurrency": args.concurrency,
        "claim_batch": args.claim_batch or args.concurrency,
        "sleep_ms": args.sleep_ms,
        **figures,
        "ok": completed == total,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "fairness", parents=[common], help="one flooding environment and three small ones"
    )
    p.add_argument("--big", type=int, default=20000, help="runs of environment A")
    p.add_argument("--small", type=int, default=200, help="runs of each of B, C and D")
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--claim-batch", type=int, help="runs per claim (default: the concurrency)")
    p.add_argument("--sleep-ms", type=float, default=2.0, help="handler sleep (async)")
    p.set_defaults(func=main)
