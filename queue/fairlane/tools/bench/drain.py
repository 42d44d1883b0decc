"""drain: N no-op runs already queued (bulk); one worker drains them.

With ``--tenants T`` the runs are spread round robin over T environments (``t000``, ...) and
every cap is on: each environment's ``concurrency_limit`` and its queue's ``concurrency_limit``
are ``--env-cap`` (default 1000: checked on every claim but never the bottleneck), and the
queue's ``size_limit`` is the number of runs (checked on every trigger). ``--tenants 1`` is the
same setup with one environment, the baseline to compare against.

With ``--keys K`` run i has the concurrency key i mod K (sql/claim/keys.sql), in the one
environment without caps: the claim walks the queue's keys round robin. Compared with the same
drain without ``--keys``, it is what keys cost.

Why so high: a run holds its environment slot until its completion is written, while the worker
frees its local slot when the handler returns and claims again at once. A completion write that
lags by a few milliseconds leaves tens of finished runs still counted; when that reaches the cap
the next claim comes back short and the worker waits out its poll interval (1 s), since no
notification follows a completion. ``--env-cap 20`` with ``--concurrency 10`` shows it.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient
from fairlane.limits import set_environment, set_queue
from fairlane.tools.bench import sizes, statements
from fairlane.tools.bench.common import (
    SCHEMA,
    count_statuses,
    emit,
    fresh_database,
    run_async,
    server_url,
)
from fairlane.tools.bench.enqueue import BATCH, TASK, open_client, trigger_bulk
from fairlane.tools.bench.running_probe import RunningProbe
from fairlane.tools.bench.sizes import flat_sizes
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

log = logging.getLogger("fairlane.tools.bench")

# Once every handler has run, how often the database is asked whether all runs are done.
POLL_S = 0.005
TIMEOUT_S = 280.0
# With --tenants: each environment's and queue's concurrency_limit unless --env-cap says.
ENV_CAP = 1000

PENDING_SQL = f"""
SELECT EXISTS (SELECT 1 FROM {SCHEMA}.runs WHERE status = 'QUEUED')
    OR EXISTS (SELECT 1 FROM {SCHEMA}.runs WHERE status = 'EXECUTING')
"""


class Tracker:
    """Counts handler calls; remembers the first one and when the target was reached."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.first_start: float | None = None
        self.done = anyio.Event()

    def hit(self) -> None:
        if self.first_start is None:
            self.first_start = time.perf_counter()
        self.count += 1
        if self.count >= self.target:
            self.done.set()


def registry_for(tracker: Tracker) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def noop(ctx: RunContext, payload: Any) -> None:
        tracker.hit()

    return tasks


async def wait_all_done(conn: psycopg.AsyncConnection[Any]) -> float:
    """Poll until no run is QUEUED or EXECUTING; returns perf_counter at that moment."""
    while True:
        cursor = await conn.execute(PENDING_SQL)
        row = await cursor.fetchone()
        if row is not None and not row[0]:
            return time.perf_counter()
        await anyio.sleep(POLL_S)


def tenant_names(tenants: int) -> list[str]:
    return [f"t{i:03d}" for i in range(tenants)]


def set_caps(dsn: str, tenants: int, cap: int, runs: int) -> None:
    """Every environment and its queue capped at ``cap`` running; queue size limits. In one
    transaction: one commit each took most of a minute at 10,000 tenants."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        for env in tenant_names(tenants):
            set_environment(conn, env, concurrency_limit=cap, schema=SCHEMA)
            set_queue(conn, env, "default", concurrency_limit=cap, size_limit=runs, schema=SCHEMA)


async def trigger_tenants(
    client: AsyncClient, runs: int, tenants: int, batch: int = BATCH
) -> float:
    """Like ``trigger_bulk``, run i going to environment i mod ``tenants``."""
    names = tenant_names(tenants)
    started = time.perf_counter()
    for offset in range(0, runs, batch):
        size = min(batch, runs - offset)
        await client.trigger_many(
            [TriggerRequest(TASK, environment=names[(offset + i) % tenants]) for i in range(size)]
        )
    return time.perf_counter() - started


async def trigger_keys(client: AsyncClient, runs: int, keys: int, batch: int = BATCH) -> float:
    """Like ``trigger_bulk``, run i with the concurrency key i mod ``keys``."""
    started = time.perf_counter()
    for offset in range(0, runs, batch):
        size = min(batch, runs - offset)
        await client.trigger_many(
            [TriggerRequest(TASK, concurrency_key=f"k{(offset + i) % keys}") for i in range(size)]
        )
    return time.perf_counter() - started


async def _drain(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    client = await open_client(dsn)
    async with client:
        if args.keys:
            enqueue_s = await trigger_keys(client, args.runs, args.keys, BATCH)
        elif args.tenants:
            enqueue_s = await trigger_tenants(client, args.runs, args.tenants, BATCH)
        else:
            enqueue_s = await trigger_bulk(client, args.runs, BATCH)
    log.info("%d runs queued in %.2fs", args.runs, enqueue_s)
    tracker = Tracker(args.runs)
    worker = Worker(
        registry_for(tracker),
        dsn,
        schema=SCHEMA,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        shutdown_grace=5.0,
        durable_claims=not args.fast_claims,
    )
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    # With --tenants (caps on): whether they held, sampled on a connection of its own.
    running = RunningProbe() if args.tenants else None
    async with probe, anyio.create_task_group() as group:
        if running is not None:
            group.start_soon(running.run, dsn)
        before = await sizes.measure_async(probe) if args.sizes else None
        if args.statements:
            await probe.execute(statements.RESET_SQL)
        cpu_started = time.process_time()
        started = time.perf_counter()
        await group.start(worker.run)
        with anyio.fail_after(TIMEOUT_S):
            await tracker.done.wait()
            done = await wait_all_done(probe)
        cpu_s = time.process_time() - cpu_started
        worker.stop()
        if running is not None:
            running.stop()
        drained = await sizes.measure_async(probe) if args.sizes else None
    seconds = done - started
    first = tracker.first_start or started
    return {
        "seconds": seconds,
        "startup_s": first - started,
        "process_s": done - first,
        "enqueue_s": enqueue_s,
        "cpu_s": cpu_s,
        "sizes": {"before": before, "drained": drained} if args.sizes else None,
        "stats": worker.stats.as_dict(),
        "caps": running.figures(env_cap(args)) if running is not None else {},
    }


def env_cap(args: argparse.Namespace) -> int:
    return int(args.env_cap or ENV_CAP)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "drain", keep=args.keep_db) as dsn:
        if args.tenants:
            set_caps(dsn, args.tenants, env_cap(args), args.runs)
        if args.statements:
            with psycopg.connect(dsn, autocommit=True) as conn:
                statements.prepare(conn)
        timing = run_async(_drain, dsn, args, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed = count_statuses(conn).get("COMPLETED", 0)
            server = statements.per_run(conn, args.runs) if args.statements else {}
        table_sizes = {**timing["sizes"], **sizes.after_maintenance(dsn)} if args.sizes else None
    log.info("worker stats: %s", timing["stats"])
    n = args.runs
    return {
        "scenario": "drain",
        "loop": loop_name(args.loop),
        "runs": n,
        "concurrency": args.concurrency,
        "claim_batch": args.claim_batch or args.concurrency,
        "durable_claims": not args.fast_claims,
        "tenants": args.tenants or 1,
        "keys": args.keys,
        "env_cap": env_cap(args) if args.tenants else None,
        "runs_per_s": round(n / timing["seconds"]),
        "process_runs_per_s": round(n / timing["process_s"]),
        "seconds": round(timing["seconds"], 3),
        "startup_s": round(timing["startup_s"], 3),
        "enqueue_runs_per_s": round(n / timing["enqueue_s"]),
        "claims": timing["stats"]["claims"],
        **timing["caps"],
        # The worker process's CPU time (Python, psycopg, the event loop) per run drained.
        "worker_cpu_us_per_run": round(timing["cpu_s"] * 1e6 / n, 1),
        **server,
        **({"runs_table": table_sizes, **flat_sizes(table_sizes)} if table_sizes else {}),
        "ok": completed == n,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("drain", parents=[common], help="drain a bulk-queued backlog")
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument(
        "--keys", type=int, help="spread the runs over this many concurrency keys (default: none)"
    )
    p.add_argument("--claim-batch", type=int, help="runs per claim (default: the concurrency)")
    p.add_argument(
        "--fast-claims",
        action="store_true",
        help="claims commit without waiting for the WAL flush (`fairlane worker --fast-claims`)",
    )
    p.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="spread the runs over this many environments, with caps on (default: one, no caps)",
    )
    p.add_argument(
        "--env-cap",
        type=int,
        help="with --tenants: each environment's and queue's concurrency_limit "
        f"(default: {ENV_CAP})",
    )
    p.add_argument(
        "--statements",
        action="store_true",
        help="report the server's time, WAL and buffers per run and statement "
        "(pg_stat_statements must be preloaded)",
    )
    p.add_argument(
        "--sizes",
        action="store_true",
        help="report the runs table's and its indexes' bytes before and after the drain, "
        "after a VACUUM, and after pruning every finished run",
    )
    p.set_defaults(func=main)
