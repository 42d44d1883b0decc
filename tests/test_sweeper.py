"""The concurrency sweeper repairs slot accounting that was corrupted by hand."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, limits, trigger_many
from fairlane.worker.leases import LeaseStore
from tests.helpers import running, statuses, wait_until

pytestmark = pytest.mark.anyio


async def test_sweeper_frees_a_leaked_slot_and_the_queue_drains(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "env", "serial", concurrency_limit=1)
    ids = trigger_many(
        db, [TriggerRequest("t", i, environment="env", queue="serial") for i in range(3)]
    )
    # Corrupt the accounting: a run holds the queue's only slot with no lease behind it.
    db.execute(
        "UPDATE fairlane.runs SET status = 'EXECUTING', attempts = 1, lease_token = NULL, "
        "lease_until = NULL WHERE id = %s",
        (ids[0],),
    )
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="probe")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await store.claim(conn, 10) == []  # the queue is blocked
        # The lease reclaimer cannot see it: it has no lease to lapse.
        db.execute("SELECT fairlane.reclaim_expired_leases()")
        assert await store.claim(conn, 10) == []
    row = db.execute("SELECT fairlane.sweep_concurrency()").fetchone()
    assert row is not None
    assert row[0]["repaired_runs"] == 1

    tasks = TaskRegistry()

    @tasks.task("t")
    async def handler(ctx: RunContext, payload: Any) -> None:
        return None

    async with running(Worker(tasks, dsn, concurrency=5)):
        await wait_until(lambda: statuses(db).get("COMPLETED") == 3, what="the queue to drain")


def test_sweeper_treats_an_absurd_lease_as_corrupt(db: psycopg.Connection[Any]) -> None:
    (run_id,) = trigger_many(db, [TriggerRequest("t", None)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'EXECUTING', attempts = 1, "
        "lease_token = gen_random_uuid(), lease_until = 'infinity' WHERE id = %s",
        (run_id,),
    )
    row = db.execute("SELECT fairlane.sweep_concurrency()").fetchone()
    assert row is not None
    assert row[0]["repaired_runs"] == 1
    assert statuses(db) == {"QUEUED": 1}
