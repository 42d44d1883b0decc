"""waits: N runs each waiting on its own token with one worker, then every token completed;
and one run with S steps replayed W times (docs/durable-execution.md).

Phase one: the worker (``wait_in_memory_s=0``) runs the N handlers, each of which waits on its
token; every run lets go of the worker. The worker's RSS once all N wait, over its RSS idle
before them, is ``rss_growth_mb``; ``leases_held`` counts waiting runs that still have a lease
(0: none is pinned to a worker). Phase two: the tokens are completed, ``COMPLETE_SLICE`` per
transaction, and ``resume_runs_per_s`` is N over the time from the first completion to the last
run COMPLETED: each run is claimed again and its handler replayed (its wait answered from its
record). Phase three: a handler runs ``--steps`` steps, then waits on ``--replays`` tokens one
after another, each wait letting go of the worker, so the handler is replayed that many times;
each step's function adds to a ledger, and ``steps_ran_once`` says every step ran exactly once.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
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
from fairlane.tools.bench.enqueue import BATCH, open_client
from fairlane.triggering.request import TriggerRequest
from fairlane.waitpoints import create_token_async
from fairlane.worker import RunContext, TaskRegistry, Worker
from fairlane.worker.process import loop_name

POLL_S = 0.02
# Each phase's bound: 100,000 runs start waiting at about 200 a second on a shared 2-vCPU box.
TIMEOUT_S = 1800.0
COMPLETE_SLICE = 5000

# The tokens and the runs waiting on them, made in bulk: one token each, in order.
MAKE_TOKENS_SQL = f"""
INSERT INTO {SCHEMA}.waitpoints (kind, status)
SELECT 'MANUAL', 'PENDING' FROM generate_series(1, %s)
RETURNING id
"""
# A slice of tokens completed, and the runs waiting on them woken, in one transaction.
COMPLETE_SQL = f"""
WITH done AS (
    UPDATE {SCHEMA}.waitpoints AS w
    SET status = 'COMPLETED', completed_at = now(), is_error = false, output = 'true'
    WHERE w.id = ANY(%s::bigint[]) AND w.status = 'PENDING'
    RETURNING w.id
)
SELECT {SCHEMA}.wake_waiting_runs(array_agg(done.id)) FROM done
"""
DETACHED_SQL = f"""
SELECT count(*) FILTER (WHERE lease_token IS NULL), count(*) FILTER (WHERE lease_token IS NOT NULL)
FROM {SCHEMA}.runs WHERE status = 'WAITING' AND task = %s
"""
UNFINISHED_SQL = f"SELECT count(*) FROM {SCHEMA}.runs WHERE task = %s AND status <> 'COMPLETED'"


def rss_mb() -> float:
    """This process's resident set (the worker runs in it)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def registry(ledger: Counter[int], steps: int) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("bench.wait")
    async def wait(ctx: RunContext, token: int) -> None:
        await ctx.wait_for_token(token)

    def record(index: int) -> int:
        ledger[index] += 1
        return index

    @tasks.task("bench.steps")
    async def stepped(ctx: RunContext, tokens: list[int]) -> int:
        total = 0
        for index in range(steps):
            total += await ctx.step(f"step {index}", record, index)
        for token in tokens:
            await ctx.wait_for_token(token)
        return total

    return tasks


async def until(conn: psycopg.AsyncConnection[Any], check: Any) -> float:
    with anyio.fail_after(TIMEOUT_S):
        while True:
            if await check(conn):
                return time.perf_counter()
            await anyio.sleep(POLL_S)


async def until_counted(
    counted: Callable[[], int], target: int, conn: psycopg.AsyncConnection[Any], check: Any
) -> float:
    """The time ``check`` holds, asked of the database only once the worker's own count of
    what it did reaches ``target``. Counting the runs every poll scans the runs table (every
    version of every run, autovacuum off): at 100,000 runs, 50 scans a second took a core
    from the worker and the server that the scenario measures (sitting 31)."""
    with anyio.fail_after(TIMEOUT_S):
        while True:
            if counted() >= target:
                return await until(conn, check)
            await anyio.sleep(POLL_S)


async def _count(conn: psycopg.AsyncConnection[Any], query: str, *params: Any) -> tuple[Any, ...]:
    cursor = await conn.execute(query, params)
    row = await cursor.fetchone()
    assert row is not None
    return tuple(row)


async def _phases(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    ledger: Counter[int] = Counter()
    worker = Worker(
        registry(ledger, args.steps),
        dsn,
        schema=SCHEMA,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        wait_in_memory_s=0.0,
        shutdown_grace=5.0,
    )
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with probe, anyio.create_task_group() as group:
        await group.start(worker.run)
        await anyio.sleep(1.0)  # connected, listening, idle
        idle_mb = rss_mb()
        tokens = [
            row[0] for row in await (await probe.execute(MAKE_TOKENS_SQL, (args.runs,))).fetchall()
        ]
        triggered = time.perf_counter()
        client = await open_client(dsn)
        async with client:
            for offset in range(0, len(tokens), BATCH):
                requests = [
                    TriggerRequest("bench.wait", token, environment="bench")
                    for token in tokens[offset : offset + BATCH]
                ]
                await client.trigger_many(requests)

        async def all_waiting(conn: psycopg.AsyncConnection[Any]) -> bool:
            detached, _ = await _count(conn, DETACHED_SQL, "bench.wait")
            return bool(detached == args.runs)

        all_waited = await until_counted(
            lambda: worker.stats.detached, args.runs, probe, all_waiting
        )
        waiting_mb = rss_mb()
        _, leased = await _count(probe, DETACHED_SQL, "bench.wait")
        held = len(worker.held)
        if args.vacuum:
            # A diagnostic: what the dead rows and index entries of the first claims cost.
            await probe.execute(f"VACUUM {SCHEMA}.runs")
        started = time.perf_counter()
        for offset in range(0, len(tokens), COMPLETE_SLICE):
            await probe.execute(COMPLETE_SQL, (tokens[offset : offset + COMPLETE_SLICE],))
        completed = time.perf_counter()

        async def all_done(conn: psycopg.AsyncConnection[Any]) -> bool:
            return bool((await _count(conn, UNFINISHED_SQL, "bench.wait"))[0] == 0)

        finished = await until_counted(lambda: worker.stats.completed, args.runs, probe, all_done)
        replays = await _replayed_steps(dsn, probe, args, ledger)
        worker.stop()
    return {
        "idle_mb": idle_mb,
        "waiting_mb": waiting_mb,
        "leases_held": leased,
        "runs_held": held,
        "resume_s": finished - started,
        "wait_s": all_waited - triggered,
        "complete_s": completed - started,
        **replays,
        "stats": worker.stats.as_dict(),
    }


async def _replayed_steps(
    dsn: str,
    probe: psycopg.AsyncConnection[Any],
    args: argparse.Namespace,
    ledger: Counter[int],
) -> dict[str, Any]:
    """One run with ``--steps`` steps, replayed once per token it waits on."""
    tokens = [await create_token_async(probe, schema=SCHEMA) for _ in range(args.replays)]
    async with await open_client(dsn) as client:
        run_id = await client.trigger("bench.steps", tokens, environment="bench")
    for token in tokens:
        # Complete each token once the run waits on it without a worker: one replay each.
        async def detached(conn: psycopg.AsyncConnection[Any]) -> bool:
            query = (
                f"SELECT status = 'WAITING' AND lease_token IS NULL FROM {SCHEMA}.runs "
                "WHERE id = %s"
            )
            return bool((await _count(conn, query, run_id))[0])

        await until(probe, detached)
        await probe.execute(COMPLETE_SQL, ([token],))

    async def done(conn: psycopg.AsyncConnection[Any]) -> bool:
        return bool((await _count(conn, UNFINISHED_SQL, "bench.steps"))[0] == 0)

    await until(probe, done)
    return {
        "steps_ran_once": sorted(ledger) == list(range(args.steps)) and set(ledger.values()) == {1},
        "step_calls": sum(ledger.values()),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "waits", keep=args.keep_db) as dsn:
        timing = run_async(_phases, dsn, args, loop=args.loop)
        with psycopg.connect(dsn, autocommit=True) as conn:
            completed = count_statuses(conn).get("COMPLETED", 0)
    stats = timing["stats"]
    growth = timing["waiting_mb"] - timing["idle_mb"]
    resume_rate = args.runs / timing["resume_s"]
    return {
        "scenario": "waits",
        "loop": loop_name(args.loop),
        "runs": args.runs,
        "concurrency": args.concurrency,
        "claim_batch": args.claim_batch or args.concurrency,
        "vacuum": args.vacuum,
        "idle_rss_mb": round(timing["idle_mb"], 1),
        "waiting_rss_mb": round(timing["waiting_mb"], 1),
        "rss_growth_mb": round(growth, 1),
        "leases_held": timing["leases_held"],
        "runs_held": timing["runs_held"],
        # From the first trigger until every run waits without a worker.
        "waiting_runs_per_s": round(args.runs / timing["wait_s"]),
        "resume_runs_per_s": round(resume_rate),
        "resume_s": round(timing["resume_s"], 3),
        # Of which completing the tokens (the worker claims and replays meanwhile).
        "complete_s": round(timing["complete_s"], 3),
        "steps": args.steps,
        "replays": args.replays,
        "step_calls": timing["step_calls"],
        "steps_ran_once": timing["steps_ran_once"],
        "worker_replays": stats["replays"],
        "steps_replayed": stats["steps_replayed"],
        "ok": completed == args.runs + 1
        and timing["steps_ran_once"]
        and timing["leases_held"] == 0
        and timing["runs_held"] == 0,
        "targets_met": growth <= 50 and resume_rate >= 5000,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "waits",
        parents=[common],
        help="runs waiting on tokens without a worker: memory, leases, resume rate, replays",
    )
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--claim-batch", type=int, help="runs per claim (default: the concurrency)")
    p.add_argument(
        "--vacuum",
        action="store_true",
        help="VACUUM the runs table once all runs wait, before the tokens are completed",
    )
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--replays", type=int, default=100)
    p.set_defaults(func=main)
