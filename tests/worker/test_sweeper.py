"""The concurrency sweeper repairs slot accounting that was corrupted by hand."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import (
    RunContext,
    TaskRegistry,
    TriggerRequest,
    Worker,
    limits,
    maintenance,
    trigger_many,
)
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import executing_run, running, statuses, wait_on_runs, wait_until

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


def test_the_sweeper_wakes_a_waiting_run_a_wake_up_missed(db: psycopg.Connection[Any]) -> None:
    """Defence in depth, and counted: the waitpoint functions do not miss a wake-up (see
    tests/sql/test_wait_races.py), but a waiting run left unready with nothing pending, here made by
    hand, is woken by the sweeper unless sweep_repair_waiting is off."""
    parent, lease = executing_run(db, "parent")
    child, _ = executing_run(db, "child")
    assert wait_on_runs(db, parent, lease, [child]) == "WAITING"
    db.execute(
        "UPDATE fairlane.waitpoints SET status = 'COMPLETED', completed_at = now()"
        " WHERE run_id = %s",
        (child,),
    )

    maintenance.set_setting(db, "sweep_repair_waiting", False)
    assert sweep(db)["waiting_repaired"] == 0
    maintenance.set_setting(db, "sweep_repair_waiting", True)
    with psycopg.connect(db.info.dsn, autocommit=True) as listener:
        listener.execute('LISTEN "fairlane.resume"')
        assert sweep(db)["waiting_repaired"] == 1
        told = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert told == [str(parent)]
    row = db.execute("SELECT status, resume_ready FROM fairlane.runs WHERE id = %s", (parent,))
    assert row.fetchone() == ("WAITING", True)
    assert sweep(db)["waiting_repaired"] == 0


def sweep(db: psycopg.Connection[Any]) -> dict[str, Any]:
    row = db.execute("SELECT fairlane.sweep_concurrency()").fetchone()
    assert row is not None
    return dict(row[0])
