"""The chaos suite's task: every execution of a run writes a ledger row when it starts and
completes that row when its handler stops, however it stops.

The row holds the worker process, the run's attempt, when the work started and stopped (this
host's wall clock) and the lease deadline the worker held for the run when it stopped (its own
lease clock, which cancels a handler whose lease it could not confirm). The ledger goes through
a small pool of the worker process's own, at the DSN in ``FAIRLANE_CHAOS_LEDGER``; a ledger
statement the server does not answer is abandoned like any of fairlane's. A start row that
cannot be written fails the attempt (it is retried) before any work is done; since the
server may still commit an INSERT whose answer never came (a frozen server), such an attempt
then writes its row as ``start_failed`` (keyed by the claim's lease token, so whichever of the
two lands second finds the first). An end row is retried for a while (a restart), then given
up, and the suite counts what was never ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool

from fairlane import RunContext, TaskRegistry
from fairlane.connection import ConnectionOptions, bounded_async
from fairlane.retry import Backoff

LEDGER_DSN_VARIABLE = "FAIRLANE_CHAOS_LEDGER"
# One ledger statement; an end row is retried for this long.
WRITE_WITHIN_S = 2.0
FINISH_WITHIN_S = 15.0
# What a stop with no reason given (cancelled from outside) is recorded as.
CANCELLED = "cancelled"
RETURNED = "returned"
START_FAILED = "start_failed"

LEDGER_TABLE = """
CREATE TABLE chaos_ledger (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    lease_token uuid NOT NULL UNIQUE,
    worker_pid integer NOT NULL,
    started_at double precision NOT NULL,
    ended_at double precision,
    lease_deadline double precision,
    end_reason text
)
"""
START = """
INSERT INTO chaos_ledger (run_id, attempt, lease_token, worker_pid, started_at)
VALUES (%s, %s, %s, %s, %s) RETURNING id
"""
VOID = """
INSERT INTO chaos_ledger (run_id, attempt, lease_token, worker_pid, started_at, ended_at,
                          end_reason)
VALUES (%s, %s, %s, %s, %s, %s, 'start_failed')
ON CONFLICT (lease_token) DO UPDATE SET end_reason = 'start_failed', ended_at = EXCLUDED.ended_at
"""
FINISH = """
UPDATE chaos_ledger SET ended_at = %s, lease_deadline = %s, end_reason = %s WHERE id = %s
"""

# Every call of a step's function (tests/chaos/test_durable_steps.py): the worker process that
# ran it, and when.
STEPS_TABLE = """
CREATE TABLE chaos_steps (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL,
    step integer NOT NULL,
    worker_pid integer NOT NULL,
    at double precision NOT NULL
)
"""
STEP = "INSERT INTO chaos_steps (run_id, step, worker_pid, at) VALUES (%s, %s, %s, %s)"

log = logging.getLogger("fairlane.chaos")
tasks = TaskRegistry()


class Ledger:
    def __init__(self) -> None:
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._opening: asyncio.Lock | None = None

    async def _connections(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        self._opening = self._opening or asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                dsn = os.environ[LEDGER_DSN_VARIABLE]
                options = ConnectionOptions(
                    connect_timeout=2,
                    statement_timeout=WRITE_WITHIN_S,
                    application_name="chaos ledger",
                )
                pool = AsyncConnectionPool(
                    dsn,
                    kwargs=options.kwargs(dsn),
                    min_size=0,
                    max_size=3,
                    open=False,
                    timeout=WRITE_WITHIN_S + 2,
                    check=AsyncConnectionPool.check_connection,
                )
                await pool.open()
                self._pool = pool
            return self._pool

    async def execute(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        pool = await self._connections()
        async with pool.connection() as conn, bounded_async(conn, WRITE_WITHIN_S + 1):
            cursor = await conn.execute(sql, params)
            return await cursor.fetchone() if cursor.description else None

    async def start(self, ctx: RunContext, started: float) -> int:
        row = await self.execute(START, (*self._execution(ctx), started))
        assert row is not None
        return int(row[0])

    async def void(self, ctx: RunContext, started: float) -> None:
        """The start row could not be written: make sure it says so, if it landed after all."""
        await self._insist(VOID, (*self._execution(ctx), started, time.time()), ctx.run_id)

    async def finish(
        self, execution: int, ended: float, deadline: float | None, reason: str
    ) -> None:
        await self._insist(FINISH, (ended, deadline, reason, execution), execution)

    @staticmethod
    def _execution(ctx: RunContext) -> tuple[Any, ...]:
        return (ctx.run_id, ctx.attempt, ctx.run.lease_token, os.getpid())

    async def _insist(self, sql: str, params: tuple[Any, ...], what: int) -> None:
        give_up_at = time.monotonic() + FINISH_WITHIN_S
        while True:
            try:
                await self.execute(sql, params)
                return
            except psycopg.Error as error:
                if time.monotonic() > give_up_at:
                    log.warning("ledger entry of %s not written: %s", what, error)
                    return
                await anyio.sleep(0.2)


ledger = Ledger()


def lease_deadline(ctx: RunContext) -> float | None:
    """The worker's lease deadline for the run, on this host's wall clock."""
    active = ctx._active
    if active is None:
        return None
    return time.time() + (active.confirmed_until - time.monotonic())


@tasks.task("chaos.work", backoff=Backoff(min_s=0.05, max_s=0.5), max_attempts=50)
async def work(ctx: RunContext, payload: dict[str, Any]) -> int:
    started = time.time()
    try:
        execution = await ledger.start(ctx, started)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await ledger.void(ctx, started)
        raise
    reason = RETURNED
    try:
        await anyio.sleep(float(payload["seconds"]))
    except BaseException:
        reason = ctx.stop_reason or CANCELLED
        raise
    finally:
        ended = time.time()
        with anyio.CancelScope(shield=True):
            await ledger.finish(execution, ended, lease_deadline(ctx), reason)
    return int(payload["n"])


async def _step(run_id: int, index: int) -> int:
    """A step's function: its side effect is its ledger row (committed before it returns)."""
    await ledger.execute(STEP, (run_id, index, os.getpid(), time.time()))
    await anyio.sleep(0.02)
    return index * index


@tasks.task("chaos.steps", backoff=Backoff(min_s=0.05, max_s=0.5), max_attempts=50)
async def steps(ctx: RunContext, payload: dict[str, Any]) -> int:
    """Steps with waits between them: each wait lets go of the worker (the fleet runs with
    --wait-in-memory 0), so the run is replayed after each."""
    total = 0
    for index in range(int(payload["steps"])):
        total += await ctx.step(f"step {index}", _step, ctx.run_id, index)
        if index % 3 == 2:
            await ctx.wait_until(float(payload["wait_s"]))
    return total
