"""TTL: armed on first enqueue, capped or filled by max_ttl_s, expired in bounded batches."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, maintenance, trigger, trigger_many
from fairlane.worker.lease_store import Failure, Lease, LeaseStore
from tests.helpers import run_status

pytestmark = pytest.mark.anyio


def expire(db: psycopg.Connection[Any]) -> dict[str, int]:
    row = db.execute("SELECT fairlane.expire_ttl_runs()").fetchone()
    assert row is not None
    return dict(row[0])


def lapse(db: psycopg.Connection[Any], *run_ids: int) -> None:
    db.execute(
        "UPDATE fairlane.runs SET expires_at = now() - interval '1 ms' WHERE id = ANY(%s)",
        (list(run_ids),),
    )


def ttl_of(db: psycopg.Connection[Any], run_id: int) -> tuple[float | None, Any]:
    row = db.execute(
        "SELECT ttl_s, expires_at - now() FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_queued_run_past_its_ttl_expires_with_a_reason(db: psycopg.Connection[Any]) -> None:
    run_id = trigger(db, "t", None, ttl=60)
    ttl, remaining = ttl_of(db, run_id)
    assert ttl == 60
    assert 59 < remaining.total_seconds() <= 60
    assert expire(db)["expired"] == 0
    lapse(db, run_id)
    assert expire(db)["expired"] == 1
    row = db.execute("SELECT status, error FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    assert row[0] == "EXPIRED"
    assert row[1]["code"] == "TTL_EXPIRED"


def test_max_ttl_fills_a_missing_ttl_and_caps_a_larger_one(db: psycopg.Connection[Any]) -> None:
    maintenance.set_setting(db, "max_ttl_s", 60)
    assert ttl_of(db, trigger(db, "t", None))[0] == 60
    assert ttl_of(db, trigger(db, "t", None, ttl=3600))[0] == 60
    assert ttl_of(db, trigger(db, "t", None, ttl=10))[0] == 10
    maintenance.set_setting(db, "max_ttl_s", None)
    assert ttl_of(db, trigger(db, "t", None))[0] is None
    assert ttl_of(db, trigger(db, "t", None, ttl=3600))[0] == 3600


def test_ttl_is_armed_when_a_delayed_run_is_first_enqueued(db: psycopg.Connection[Any]) -> None:
    run_id = trigger(db, "t", None, ttl=30, delay=60)
    assert ttl_of(db, run_id)[1] is None  # not armed while delayed
    db.execute("UPDATE fairlane.runs SET available_at = now() WHERE id = %s", (run_id,))
    db.execute("SELECT fairlane.promote_delayed_runs()")
    remaining = ttl_of(db, run_id)[1]
    assert remaining is not None
    assert 29 < remaining.total_seconds() <= 30


async def test_a_run_that_started_never_expires(dsn: str, db: psycopg.Connection[Any]) -> None:
    run_id = trigger(db, "t", None, ttl=30)
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="w")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (run,) = await store.claim(conn, 1)
        lapse(db, run_id)
        assert expire(db)["expired"] == 0  # executing
        lease = Lease(run.id, run.lease_token)
        await store.fail(conn, [Failure(lease, "{}", "DELAYED", 0.0)])
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert run_status(db, run_id) == "QUEUED"
    assert expire(db)["expired"] == 0  # a retry is not a first enqueue
    assert run_status(db, run_id) == "QUEUED"


def test_ten_thousand_runs_expire_in_bounded_statements(db: psycopg.Connection[Any]) -> None:
    ids = trigger_many(db, [TriggerRequest("t", i, ttl=3600) for i in range(10_000)])
    lapse(db, *ids)
    maintenance.set_setting(db, "ttl_batch_size", 1000)
    maintenance.set_setting(db, "ttl_max_batches", 3)
    ticks = []
    while True:
        outcome = expire(db)
        ticks.append(outcome)
        if outcome["expired"] == 0:
            break
    assert all(tick["expired"] <= 3000 and tick["statements"] <= 3 for tick in ticks)
    assert sum(tick["expired"] for tick in ticks) == 10_000
    assert len(ticks) == 5  # 3000 + 3000 + 3000 + 1000, then nothing left
    count = db.execute("SELECT count(*) FROM fairlane.runs WHERE status = 'EXPIRED'").fetchone()
    assert count == (10_000,)


def let_time_pass(db: psycopg.Connection[Any], seconds: float) -> None:
    """Move every armed TTL deadline ``seconds`` closer, as if that much time had passed."""
    db.execute(
        "UPDATE fairlane.runs SET expires_at = expires_at - make_interval(secs => %s)"
        " WHERE expires_at IS NOT NULL",
        (seconds,),
    )


async def test_a_run_handed_back_at_shutdown_never_expires(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    run_id = trigger(db, "t", None, ttl=30)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (run,) = await store.claim(conn, 1)
        let_time_pass(db, 31)  # the TTL would have lapsed while it ran
        assert await store.release(conn, [Lease(run.id, run.lease_token)]) == {run_id}
    assert expire(db)["expired"] == 0
    row = db.execute(
        "SELECT status, attempts, expires_at FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row == ("QUEUED", 0, None), "the attempt is given back, the TTL stays disarmed"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert [claimed.id for claimed in await store.claim(conn, 1)] == [run_id]


async def test_a_reclaimed_run_never_expires(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    run_id = trigger(db, "t", None, ttl=30, max_attempts=2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await store.claim(conn, 1)
    db.execute(
        "UPDATE fairlane.runs SET lease_until = now() - interval '1 ms' WHERE id = %s", (run_id,)
    )
    reclaimed = db.execute("SELECT fairlane.reclaim_expired_leases()").fetchone()
    assert reclaimed is not None
    assert reclaimed[0]["requeued"] == 1
    let_time_pass(db, 31)
    assert expire(db)["expired"] == 0
    assert run_status(db, run_id) == "QUEUED"


async def test_the_claim_never_starts_a_run_whose_ttl_lapsed(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """The expiry job has not run yet: the claim skips the lapsed run and starts the one
    behind it; the next expiry tick ends the lapsed one."""
    lapsed, fresh = trigger(db, "t", None, ttl=30), trigger(db, "t", None, ttl=3600)
    untimed = trigger(db, "t", None)
    let_time_pass(db, 31)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed = await store.claim(conn, 10)
    assert sorted(run.id for run in claimed) == [fresh, untimed]
    assert run_status(db, lapsed) == "QUEUED"
    assert expire(db)["expired"] == 1
    assert run_status(db, lapsed) == "EXPIRED"
