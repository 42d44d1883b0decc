"""Maintenance jobs under concurrent transactions: the periodic runner runs a tick once, two
reclaims or expiries share the rows instead of waiting for each other, and a claim never
waits for (nor starts) a run whose TTL expiry is in flight."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane import maintenance, trigger
from fairlane.engine.sqlfiles import query
from tests.helpers import claim_params, run_status, statuses
from tests.helpers.interleave import sessions

NEXT_JOB = "SELECT fairlane.run_next_due_job(%s::text[])"
RECLAIM = "SELECT fairlane.reclaim_expired_leases()"
EXPIRE = "SELECT fairlane.expire_ttl_runs()"
CLAIM_PARAMS = claim_params(worker_id="w")


def test_a_job_one_session_runs_is_skipped_by_another_and_not_run_twice(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Each job runs in a transaction of its own (run_next_due_job), its row locked: another
    runner skips it and takes the next due job instead of waiting, and once the first commits
    the job is due again only at its next tick."""
    db.execute(
        "UPDATE fairlane.periodic_jobs SET enabled = (name IN ('promote_delayed_runs',"
        " 'expire_ttl_runs')), next_due_at = now() - interval '1 s'"
    )
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        ((first,),) = a.run(NEXT_JOB, ([],))
        pending = b.start(NEXT_JOB, ([],))
        assert not b.blocked_or_done(), "the second runner waited for the first one's job"
        ((second,),) = pending.result(timeout=30)
        assert set(first) | set(second) == {"promote_delayed_runs", "expire_ttl_runs"}
        assert b.run(NEXT_JOB, ([],)) == [(None,)]
        a.commit()
        b.commit()
        assert b.run(NEXT_JOB, ([],)) == [(None,)], "due again only at their next tick"


def test_two_reclaims_share_the_lapsed_leases(dsn: str, db: psycopg.Connection[Any]) -> None:
    for n in range(3):
        trigger(db, "t", n)
    db.execute(query("claim_runs", "fairlane"), CLAIM_PARAMS)
    db.execute("UPDATE fairlane.runs SET lease_until = now() - interval '1 ms'")
    maintenance.set_setting(db, "reclaim_batch_size", 2)
    maintenance.set_setting(db, "reclaim_max_batches", 1)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        assert a.run("SELECT fairlane.reclaim_expired_leases()")[0][0]["requeued"] == 2
        pending = b.start(RECLAIM)
        assert not b.blocked_or_done()
        assert pending.result(timeout=30)[0][0]["requeued"] == 1
        a.commit()
    assert statuses(db) == {"QUEUED": 3}
    attempts = db.execute("SELECT DISTINCT attempts FROM fairlane.runs").fetchall()
    assert attempts == [(1,)], "each lapsed attempt was reclaimed once"


def test_a_claim_does_not_wait_for_a_run_whose_expiry_is_in_flight(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    lapsed, fresh = trigger(db, "t", None, ttl=30), trigger(db, "t", None, ttl=3600)
    db.execute(
        "UPDATE fairlane.runs SET expires_at = now() - interval '1 ms' WHERE id = %s", (lapsed,)
    )
    with sessions(dsn, 2) as (expiry, claimer):
        expiry.begin()
        assert expiry.run(EXPIRE)[0][0]["expired"] == 1
        pending = claimer.start(query("claim_runs", "fairlane"), CLAIM_PARAMS)
        assert not claimer.blocked_or_done(), "the claim waited for the expiry"
        assert [row[0] for row in pending.result(timeout=30)] == [fresh]
        expiry.commit()
    assert run_status(db, lapsed) == "EXPIRED"
    assert run_status(db, fresh) == "EXECUTING"
