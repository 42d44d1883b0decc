"""The claim's decisions under concurrent transactions, stepped statement by statement
(tests/helpers/interleave.py): slot counts under the environment's row lock, the global cap and the
rate bucket under the scheduler row, a pause that lands while a claim waits, the drained mark
and the marking of environments a scan found."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.engine.sqlfiles import query
from tests.helpers import claim_params
from tests.helpers.interleave import Rows, Session, sessions

CLAIM = query("claim_runs", "fairlane")


def claim(
    session: Session,
    limit: int,
    *,
    environments: list[str] | None = None,
    full_scan: bool = True,
    wait: bool = False,
    tasks: list[str] | None = None,
) -> Future[Rows]:
    """Claim as a worker does; with ``wait`` the claim must first wait for another session."""
    params = claim_params(
        limit=limit,
        worker_id=session.name,
        environments=environments,
        full_scan=full_scan,
        tasks=tasks,
    )
    pending = session.start(CLAIM, params)
    if wait:
        session.blocked()
    return pending


def claim_in_transaction(
    session: Session,
    limit: int,
    environments: list[str] | None = None,
    tasks: list[str] | None = None,
) -> Rows:
    """Claim inside a transaction left open: the session holds what the claim locked."""
    session.begin()
    return claim(session, limit, environments=environments, tasks=tasks).result(timeout=30)


def environments_of(rows: Rows) -> list[str]:
    return sorted(str(row[6]) for row in rows)


def queue(db: psycopg.Connection[Any], environment: str, count: int, **options: Any) -> list[int]:
    return trigger_many(
        db, [TriggerRequest("t", i, environment=environment, **options) for i in range(count)]
    )


def executing(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs WHERE status = 'EXECUTING'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("cap", ["environment", "queue"])
def test_two_claims_against_a_cap_of_one_start_one_run(
    dsn: str, db: psycopg.Connection[Any], cap: str
) -> None:
    """The second claim waits for the environment's row, then counts the slot holders in a
    later statement: it sees the first claim's run and starts nothing."""
    queue(db, "acme", 5)
    if cap == "environment":
        limits.set_environment(db, "acme", concurrency_limit=1)
    else:
        limits.set_queue(db, "acme", "default", concurrency_limit=1)
    with sessions(dsn, 2) as (a, b):
        assert len(claim_in_transaction(a, 10)) == 1
        pending = claim(b, 10, wait=True)
        assert b.blockers() == [a.pid]
        a.commit()
        assert pending.result(timeout=30) == []
    assert executing(db) == 1


def test_a_claim_that_waited_for_a_busy_environment_takes_what_is_left(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """One busy tenant, two workers: the second claim waits for the row instead of coming
    back empty, and reads the queued runs after the lock, so it never takes the first's."""
    queue(db, "acme", 3)
    with sessions(dsn, 2) as (a, b):
        first = claim_in_transaction(a, 2)
        pending = claim(b, 10, wait=True)
        a.commit()
        second = pending.result(timeout=30)
    assert len(first) == 2
    assert len(second) == 1
    assert {row[0] for row in first}.isdisjoint(row[0] for row in second)


def test_claimers_of_disjoint_tasks_wait_for_the_environment_and_take_only_their_own(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Two workers with disjoint task sets over one busy tenant: the second waits for the row
    the first holds (the filter takes no lock of its own and changes no lock order), then
    reads the queued runs after the lock and takes its own, and only those."""
    mine = trigger_many(db, [TriggerRequest("a", i, environment="acme") for i in range(2)])
    theirs = trigger_many(db, [TriggerRequest("b", i, environment="acme") for i in range(3)])
    with sessions(dsn, 2) as (a, b):
        first = claim_in_transaction(a, 10, tasks=["a"])
        pending = claim(b, 10, full_scan=False, wait=True, tasks=["b"])
        assert b.blockers() == [a.pid]
        a.commit()
        second = pending.result(timeout=30)
    assert sorted(row[0] for row in first) == mine
    assert sorted(row[0] for row in second) == theirs


def test_the_global_cap_is_counted_under_the_scheduler_row(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    queue(db, "acme", 3)
    queue(db, "globex", 3)
    limits.set_scheduler(db, global_concurrency_limit=1)
    with sessions(dsn, 2) as (a, b):
        assert environments_of(claim_in_transaction(a, 1, ["acme"])) == ["acme"]
        # Another environment, so only the scheduler row can make it wait.
        pending = claim(b, 10, environments=["globex"], wait=True)
        assert b.blockers() == [a.pid]
        a.commit()
        assert pending.result(timeout=30) == []
    assert executing(db) == 1


def test_the_rate_bucket_is_read_after_its_lock(dsn: str, db: psycopg.Connection[Any]) -> None:
    """Two tokens, refilled at one per 100 s: the first claim takes both; the second waits
    for the scheduler row and finds the bucket empty."""
    queue(db, "acme", 2)
    queue(db, "globex", 2)
    limits.set_scheduler(db, rate_limit_per_s=0.01, rate_burst=2)
    with sessions(dsn, 2) as (a, b):
        assert len(claim_in_transaction(a, 10, ["acme"])) == 2
        pending = claim(b, 10, environments=["globex"], wait=True)
        a.commit()
        assert pending.result(timeout=30) == []
    assert executing(db) == 2


def test_a_pause_that_lands_while_a_claim_waits_is_respected(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The claim found the environment unpaused, waited for its row while an operator paused
    it, and decides on the row it got: nothing starts in a paused environment."""
    queue(db, "acme", 3)
    with sessions(dsn, 2) as (operator, worker):
        operator.begin()
        limits.set_environment(operator.conn, "acme", paused=True)
        pending = claim(worker, 10, wait=True)
        operator.commit()
        assert pending.result(timeout=30) == []
    assert executing(db) == 0


def test_a_drained_mark_a_trigger_in_flight_made_stale_is_undone_by_the_next_scan(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A claim takes acme's last run and marks it drained while a trigger into acme has not
    committed yet (the claim cannot see its run). The run is not lost: the trigger's
    notification makes workers scan, and the scan finds acme again."""
    queue(db, "acme", 1)
    queue(db, "busy", 100)
    with sessions(dsn, 3) as (trigger, a, b):
        trigger.begin()
        (late,) = trigger_many(trigger.conn, [TriggerRequest("t", "late", environment="acme")])
        assert sorted(environments_of(claim(a, 51).result(timeout=30))) == ["acme"] + ["busy"] * 50
        trigger.commit()
        drained = db.execute("SELECT drained FROM fairlane.environments WHERE name = 'acme'")
        assert drained.fetchone() == (True,), "the claim could not see the trigger's run"
        # Claims of the known environments alone are filled by busy and miss acme ...
        assert environments_of(claim(b, 5, full_scan=False).result(timeout=30)) == ["busy"] * 5
        # ... the scan that the trigger's notification asks for finds it again: it serves acme
        # at once, or marks it active for the next claim.
        found = claim(b, 5).result(timeout=30) + claim(b, 5, full_scan=False).result(timeout=30)
    assert late in {row[0] for row in found}


def test_marking_skips_an_environment_another_claim_is_charging(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A scan found acme and globex; globex fills the claim, and acme, held by another claim,
    is left to that claim to charge instead of being waited for."""
    queue(db, "acme", 2)
    queue(db, "globex", 2)
    db.execute("UPDATE fairlane.environments SET drained = true")
    with sessions(dsn, 2) as (a, b):
        assert len(claim_in_transaction(a, 1, ["acme"])) == 1
        pending = claim(b, 1)
        assert not b.blocked_or_done(), "the claim waited for a row it only had to mark"
        assert environments_of(pending.result(timeout=30)) == ["globex"]
        a.commit()
    rows = db.execute("SELECT name, drained FROM fairlane.environments ORDER BY name")
    assert rows.fetchall() == [("acme", False), ("globex", False)]
