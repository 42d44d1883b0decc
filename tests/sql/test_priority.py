"""Priority is a time offset: a run of priority p is claimed as if it had been queued p
seconds earlier (then by id), so no run waits forever behind higher priorities.

Claims are driven by hand with the worker's statements. Time is simulated: the tests set the
``queued_at`` of the runs they trigger to the moments they mean, on a clock of their own.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from fairlane import Client, TriggerRequest, trigger, trigger_many
from fairlane.schema import migrate
from fairlane.worker.lease_store import Failure, Lease, LeaseStore
from tests.helpers import claim_and_complete, run_row

pytestmark = pytest.mark.anyio


def queued_at(db: psycopg.Connection[Any], run_id: int, at: datetime) -> None:
    db.execute("UPDATE fairlane.runs SET queued_at = %s WHERE id = %s", (at, run_id))


def order_key(db: psycopg.Connection[Any], run_id: int) -> datetime:
    row = db.execute("SELECT queue_order FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    assert isinstance(row[0], datetime)
    return row[0]


def database_now(db: psycopg.Connection[Any]) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


async def claim_one_by_one(dsn: str, store: LeaseStore, count: int, **options: Any) -> list[int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed: list[int] = []
        for _ in range(count):
            claimed += [run.id for run in await claim_and_complete(conn, store, 1, **options)]
    return claimed


async def test_a_low_priority_run_starts_while_high_priority_runs_keep_arriving(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Every simulated second three priority-10 runs arrive and two runs are started: the
    priority-10 stream alone saturates the queue. The priority-0 run goes once the runs that
    arrived less than 10 s after it are gone: the 27 of the first nine seconds."""
    start = database_now(db)
    low = trigger(db, "t", "low", priority=0)
    queued_at(db, low, start)
    started_before_low: list[int] = []
    arrived: dict[int, int] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for second in range(1, 31):
            for run_id in trigger_many(db, [TriggerRequest("t", second, priority=10)] * 3):
                queued_at(db, run_id, start + timedelta(seconds=second))
                arrived[run_id] = second
            claimed = [run.id for run in await claim_and_complete(conn, store, 2)]
            if low in claimed:
                started_before_low += claimed[: claimed.index(low)]
                break
            started_before_low += claimed
        else:
            pytest.fail("the priority-0 run waited 30 s behind a stream of priority-10 runs")
    # The runs of second 10 count as queued at the same moment as it: it is older (lower id).
    assert second == 14, "27 runs ahead of it, two started per second"
    assert sorted(arrived[run_id] for run_id in started_before_low) == sorted(
        second for second in range(1, 10) for _ in range(3)
    ), "exactly the runs that arrived within 10 s of it went first"


async def test_priority_is_a_head_start_in_seconds_then_id(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    now = database_now(db)
    first, same_time = trigger(db, "t", None), trigger(db, "t", None)
    early_urgent = trigger(db, "t", None, priority=5)
    late_urgent = trigger(db, "t", None, priority=5, queue="other")
    negative = trigger(db, "t", None, priority=-2)
    for run_id in (first, same_time):
        queued_at(db, run_id, now)
    queued_at(db, early_urgent, now + timedelta(seconds=3))  # counts as now - 2 s
    queued_at(db, late_urgent, now + timedelta(seconds=7))  # counts as now + 2 s
    queued_at(db, negative, now - timedelta(seconds=1))  # counts as now + 1 s
    assert order_key(db, early_urgent) == now - timedelta(seconds=2)
    assert order_key(db, negative) == now + timedelta(seconds=1)
    with Client(dsn) as client:
        shown = client.get_run(early_urgent)
    assert (shown.queued_at, shown.queue_order) == (
        now + timedelta(seconds=3),
        now - timedelta(seconds=2),
    )
    order = await claim_one_by_one(dsn, store, 5)
    # Across the environment's queues too: "other" is merged by the same key.
    assert order == [early_urgent, first, same_time, negative, late_urgent]


async def test_a_run_counts_as_queued_when_its_delay_ended(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Promotion queues a run as of its due time, not the tick that promoted it, so runs due
    earlier stay ahead of runs triggered after they were due, however late the tick."""
    now = database_now(db)
    due_first, due_later = trigger(db, "t", None, delay=60), trigger(db, "t", None, delay=60)
    db.execute(
        "UPDATE fairlane.runs SET available_at = %s WHERE id = %s",
        (now - timedelta(seconds=5), due_later),
    )
    db.execute(
        "UPDATE fairlane.runs SET available_at = %s WHERE id = %s",
        (now - timedelta(seconds=10), due_first),
    )
    in_between = trigger(db, "t", None)
    queued_at(db, in_between, now - timedelta(seconds=7))
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert run_row(db, due_first)["queued_at"] == now - timedelta(seconds=10)
    assert await claim_one_by_one(dsn, store, 3) == [due_first, in_between, due_later]


async def test_a_retried_run_queues_behind_runs_that_came_before_its_backoff_ended(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    retried = trigger(db, "t", None, max_attempts=2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (run,) = await store.claim(conn, 1)
        meanwhile = trigger(db, "t", None)
        failure = Failure(Lease(run.id, run.lease_token), "{}", "DELAYED", 0.0)
        assert await store.fail(conn, [failure]) == {retried}
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert await claim_one_by_one(dsn, store, 2) == [meanwhile, retried]


async def test_a_run_handed_back_keeps_its_place(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Released at shutdown or reclaimed after its lease lapsed, a run goes back where it
    was: ahead of the runs queued after it."""
    handed_back, behind = trigger(db, "t", None), trigger(db, "t", None)
    released_at = run_row(db, handed_back)["queued_at"]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (run,) = await store.claim(conn, 1)
        assert await store.release(conn, [Lease(run.id, run.lease_token)]) == {handed_back}
        (again,) = await store.claim(conn, 1)
        assert again.id == handed_back
        db.execute("UPDATE fairlane.runs SET lease_until = now() - interval '1 ms'")
        db.execute("SELECT fairlane.reclaim_expired_leases()")
        assert [run.id for run in await store.claim(conn, 1)] == [handed_back]
    assert run_row(db, handed_back)["queued_at"] == released_at
    assert run_row(db, behind)["status"] == "QUEUED"


async def test_a_manual_retry_queues_the_run_as_of_the_retry(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    failed = trigger(db, "t", None, max_attempts=1)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (run,) = await store.claim(conn, 1)
        await store.fail(conn, [Failure(Lease(run.id, run.lease_token), "{}", "FAILED", None)])
    waiting = trigger(db, "t", None)
    with Client(dsn) as client:
        client.retry(failed)
    assert await claim_one_by_one(dsn, store, 2) == [waiting, failed]


async def test_an_upgrade_keeps_the_order_of_the_runs_already_queued(
    empty_database: Any, store: LeaseStore
) -> None:
    """Revision 0012 gives the runs that were queued before it their time of queueing: their
    creation, or their due time if they were delayed."""
    dsn = empty_database()
    migrate.upgrade(dsn, revision="0011")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO fairlane.environments (name) VALUES ('default')")
        conn.execute(
            "INSERT INTO fairlane.queues (environment, name) VALUES ('default', 'default')"
        )
        rows = conn.execute(
            "INSERT INTO fairlane.runs (task, payload, status, priority, created_at, available_at)"
            " VALUES ('t', '1', 'QUEUED', 0, now() - interval '60 s', NULL),"
            "        ('t', '2', 'QUEUED', 30, now() - interval '20 s', NULL),"  # as of -50 s
            "        ('t', '3', 'QUEUED', 0, now() - interval '90 s', now() - interval '55 s'),"
            "        ('t', '4', 'QUEUED', 0, now() - interval '10 s', NULL)"
            " RETURNING id"
        ).fetchall()
    migrate.upgrade(dsn)
    first, urgent, promoted, last = (row[0] for row in rows)
    assert await claim_one_by_one(dsn, store, 4) == [first, promoted, urgent, last]
