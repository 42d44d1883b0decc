"""max_duration (point 6): a handler running past it is cancelled and the run ends TIMED_OUT
with MAX_DURATION_EXCEEDED, whatever attempts it has left: no retry."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry, Worker
from tests.helpers import run_row, run_status, running, wait_until

pytestmark = pytest.mark.anyio


async def test_async_handler_past_max_duration_times_out_without_retry(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    attempts: list[int] = []
    cancelled = anyio.Event()

    @tasks.task("slow")
    async def slow(ctx: RunContext, payload: None) -> str:
        attempts.append(ctx.attempt)
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return "never"

    worker = Worker(tasks, dsn, poll_interval=0.1, periodic_interval=0.05)
    async with AsyncClient(dsn) as client, running(worker):
        run_id = await client.trigger("slow", max_duration="500ms", max_attempts=3)
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.TIMED_OUT, within=10, what="time-out"
        )
        # Give a retry every chance to happen (it would be claimed at once): five more claims
        # and periodic ticks later, none has.
        claims, ticks = worker.stats.claims, worker.stats.periodic_ticks
        await wait_until(
            lambda: worker.stats.claims >= claims + 5 and worker.stats.periodic_ticks >= ticks + 5,
            within=10,
            what="five more claims and ticks",
        )
    row = run_row(db, run_id)
    assert cancelled.is_set()
    assert attempts == [1]
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("TIMED_OUT", 1, 3)
    assert row["error"]["code"] == "MAX_DURATION_EXCEEDED"
    assert row["finished_at"] is not None
    assert worker.stats.timed_out == 1
    assert worker.stats.retried == 0


async def test_sync_handler_past_max_duration_times_out(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    told_to_stop = threading.Event()

    @tasks.task("blocking")
    def blocking(ctx: RunContext, payload: None) -> None:
        if ctx.stop_requested.wait(10):
            told_to_stop.set()

    async with AsyncClient(dsn) as client, running(Worker(tasks, dsn, poll_interval=0.1)):
        run_id = await client.trigger("blocking", max_duration=0.3, max_attempts=2)
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.TIMED_OUT, within=10, what="time-out"
        )
        await wait_until(told_to_stop.is_set, within=5, what="the thread to be told")
    assert run_row(db, run_id)["attempts"] == 1


async def test_a_handler_within_max_duration_completes(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("quick")
    async def quick(ctx: RunContext, payload: None) -> str:
        return "done"

    async with AsyncClient(dsn) as client, running(Worker(tasks, dsn, poll_interval=0.1)):
        run_id = await client.trigger("quick", max_duration="1m")
        assert (await client.get_run(run_id)).max_duration_s == 60.0
        await wait_until(lambda: run_status(db, run_id) is RunStatus.COMPLETED, what="done")


async def test_time_spent_waiting_does_not_count_toward_max_duration(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A run with max_duration 1 s waits 1.5 s and then works 0.3 s: it completes. One that
    works 0.6 s, waits, then works 0.6 s more has run 1.2 s: it ends TIMED_OUT, not retried,
    even though each stretch alone fits (and its lease never lapses while it waits)."""
    tasks = TaskRegistry()

    @tasks.task("patient")
    async def patient(ctx: RunContext, work_s: float) -> str:
        await anyio.sleep(work_s)
        await ctx.wait_until(1.5)
        await anyio.sleep(work_s)
        return "done"

    worker = Worker(tasks, dsn, poll_interval=0.05, periodic_interval=0.05, lease_seconds=5)
    async with AsyncClient(dsn) as client, running(worker):
        within = await client.trigger("patient", 0.15, max_duration=1, max_attempts=3)
        beyond = await client.trigger("patient", 0.6, max_duration=1, max_attempts=3)
        await wait_until(
            lambda: run_status(db, within) is RunStatus.COMPLETED, within=15, what="the first"
        )
        await wait_until(
            lambda: run_status(db, beyond) is RunStatus.TIMED_OUT, within=15, what="the second"
        )
    assert run_row(db, within)["result"] == "done"
    row = run_row(db, beyond)
    assert (row["attempts"], row["error"]["code"]) == (1, "MAX_DURATION_EXCEEDED")
    assert worker.stats.timed_out == 1
    assert worker.stats.retried == 0
