"""promote: N delayed runs fall due at once; how fast does the periodic job make them QUEUED?

N no-op runs are triggered with a one-hour delay (1000 per ``trigger_many`` call), then one
statement makes all of them due now and the promotion job due with them. From that commit the
periodic jobs run as a worker runs them: ``run_due_periodic_jobs()`` every ``--interval``
seconds (a worker's default, 0.25 s) on one connection, while another connection polls every
5 ms until no run is DELAYED any more. ``runs_per_s`` is N over that wall time, which includes
waiting for the ticks: the rate at which runs that are due become claimable. ``--batch-size``
and ``--max-batches`` set ``promote_batch_size`` and ``promote_max_batches`` for the run
(default: the seeded settings).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
import psycopg

from fairlane.tools.bench.common import (
    SCHEMA,
    count_statuses,
    emit,
    fresh_database,
    run_async,
    server_url,
)
from fairlane.tools.bench.enqueue import BATCH, TASK, open_client
from fairlane.triggering.request import TriggerRequest
from fairlane.worker.periodic import run_due_jobs
from fairlane.worker.process import loop_name

POLL_S = 0.005
TIMEOUT_S = 280.0
JOB = "promote_delayed_runs"

MAKE_DUE_SQL = f"""
UPDATE {SCHEMA}.runs SET available_at = now() WHERE status = 'DELAYED';
UPDATE {SCHEMA}.periodic_jobs SET next_due_at = now() WHERE name = '{JOB}';
"""
DELAYED_LEFT_SQL = f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.runs WHERE status = 'DELAYED')"


async def trigger_delayed(dsn: str, runs: int) -> None:
    client = await open_client(dsn)
    async with client:
        for offset in range(0, runs, BATCH):
            size = min(BATCH, runs - offset)
            await client.trigger_many([TriggerRequest(TASK, delay="1h") for _ in range(size)])


def apply_settings(dsn: str, args: argparse.Namespace) -> dict[str, int]:
    """Set the promotion settings the arguments name; return the ones in effect."""
    wanted = {"promote_batch_size": args.batch_size, "promote_max_batches": args.max_batches}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in wanted.items():
            if value is not None:
                conn.execute(
                    f"UPDATE {SCHEMA}.settings SET value = %s::jsonb WHERE name = %s",
                    (json.dumps(value), name),
                )
        rows = conn.execute(
            f"SELECT name, value FROM {SCHEMA}.settings WHERE name = ANY(%s)", (list(wanted),)
        ).fetchall()
    return {str(name): int(value) for name, value in rows}


class Ticks:
    """The periodic runner of one worker, and what its promotion ticks did."""

    def __init__(self) -> None:
        self.promoted: list[int] = []
        self.statements = 0
        self.busy_s = 0.0
        # Set when every run is promoted: the tick in flight still records what it did (each
        # job commits before the runner's call returns, so the probe can see it first).
        self.stop = anyio.Event()

    async def run(self, conn: psycopg.AsyncConnection[Any], interval: float) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            ran = await run_due_jobs(conn, SCHEMA)
            outcome = ran.results.get(JOB)
            if outcome and outcome.get("promoted"):
                self.promoted.append(int(outcome["promoted"]))
                self.statements += int(outcome.get("statements", 1))
                self.busy_s += time.perf_counter() - started
            with anyio.move_on_after(interval):
                await self.stop.wait()


async def _promote(dsn: str, interval: float) -> dict[str, Any]:
    ticks = Ticks()
    runner = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with runner, probe, anyio.create_task_group() as group:
        await probe.execute(MAKE_DUE_SQL)
        due = time.perf_counter()
        group.start_soon(ticks.run, runner, interval)
        with anyio.fail_after(TIMEOUT_S):
            while True:
                row = await (await probe.execute(DELAYED_LEFT_SQL)).fetchone()
                if row is not None and not row[0]:
                    break
                await anyio.sleep(POLL_S)
        done = time.perf_counter()
        ticks.stop.set()
    return {"seconds": done - due, "ticks": ticks}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "promote", keep=args.keep_db) as dsn:
        settings = apply_settings(dsn, args)
        run_async(trigger_delayed, dsn, args.runs, loop=args.loop)
        timing = run_async(_promote, dsn, args.interval, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            queued = count_statuses(conn).get("QUEUED", 0)
    ticks: Ticks = timing["ticks"]
    return {
        "scenario": "promote",
        "loop": loop_name(args.loop),
        "runs": args.runs,
        "batch_size": settings.get("promote_batch_size"),
        "max_batches": settings.get("promote_max_batches"),
        "interval": args.interval,
        "runs_per_s": round(args.runs / timing["seconds"]),
        "seconds": round(timing["seconds"], 3),
        "ticks": len(ticks.promoted),
        "statements": ticks.statements,
        "promoted_per_tick": ticks.promoted,
        "tick_busy_s": round(ticks.busy_s, 3),
        "ok": queued == args.runs,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "promote", parents=[common], help="delayed runs falling due at once: promotion rate"
    )
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument("--batch-size", type=int, help="promote_batch_size (default: the setting)")
    p.add_argument("--max-batches", type=int, help="promote_max_batches (default: the setting)")
    p.add_argument(
        "--interval", type=float, default=0.25, help="seconds between periodic-job calls"
    )
    p.set_defaults(func=main)
