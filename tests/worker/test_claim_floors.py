"""A worker draining a deep queue claims with floors (each queue's walk starts after the last
run it claimed there) while its claims come back full. What sorts before a floor is still
run: a higher-priority run at once (its trigger's notification makes the next claim a full
scan, made without floors), a run handed back without a notification within the poll interval
(every poll interval brings a full scan)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import TriggerRequest, trigger, trigger_many
from fairlane.worker import RunContext, TaskRegistry
from tests.helpers import fast_worker, running, wait_until

pytestmark = pytest.mark.anyio

BACKLOG = 400


def started_order() -> tuple[TaskRegistry, list[int]]:
    tasks = TaskRegistry()
    started: list[int] = []

    @tasks.task("t")
    async def work(ctx: RunContext, payload: Any) -> None:
        started.append(ctx.run_id)
        await anyio.sleep(0.02)

    return tasks, started


async def test_a_priority_run_is_not_left_behind_a_floor(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks, started = started_order()
    backlog = trigger_many(db, [TriggerRequest("t", i) for i in range(BACKLOG)])
    worker = fast_worker(tasks, dsn, concurrency=4, claim_batch=4, poll_interval=30.0)
    async with running(worker):
        await wait_until(lambda: len(started) >= 40, what="the drain to be under way")
        assert len(worker._floors) == 1, "full claims keep a floor"
        before = len(started)
        urgent = trigger(db, "t", "urgent", priority=3600)
        await wait_until(lambda: urgent in started, within=10, what="the urgent run")
        # Claimed by the first claim after the notification: runs claimed before it was
        # triggered, or while the notification was on its way, are all that start first.
        late = started.index(urgent) - before
        assert late < 16, f"the urgent run started after {late} others"
        remaining = [run_id for run_id in backlog if run_id not in started]
        assert remaining, "the backlog outlasted the check: claims were full throughout"
        worker.stop()


async def test_a_run_handed_back_behind_a_floor_runs_within_the_poll_interval(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks, started = started_order()
    trigger_many(db, [TriggerRequest("t", i) for i in range(BACKLOG)])
    poll_interval = 0.5
    # Listening, so claims between full scans carry floors; no notification announces the run
    # handed back below (as when a lapsed lease is reclaimed).
    worker = fast_worker(tasks, dsn, concurrency=4, claim_batch=4, poll_interval=poll_interval)
    async with running(worker):
        await wait_until(lambda: len(started) >= 40, what="the drain to be under way")
        first = started[0]
        await wait_until(
            lambda: (
                db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (first,)).fetchone()
                == ("COMPLETED",)
            ),
            what="the first run to complete",
        )
        db.execute(
            "UPDATE fairlane.runs SET status = 'QUEUED', finished_at = NULL, result = NULL"
            " WHERE id = %s",
            (first,),
        )
        handed_back = time.monotonic()
        await wait_until(
            lambda: started.count(first) == 2, within=5, what="the handed-back run to run again"
        )
        waited = time.monotonic() - handed_back
        queued = db.execute("SELECT count(*) FROM fairlane.runs WHERE status = 'QUEUED'")
        remaining = queued.fetchone()
        assert remaining is not None
        assert remaining[0] > 0, "the backlog outlasted the check: claims were full throughout"
        assert waited < poll_interval + 1.0, f"ran again after {waited:.2f} s"
        worker.stop()
