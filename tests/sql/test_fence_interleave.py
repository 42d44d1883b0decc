"""The fence under concurrent transactions: every write a worker makes about a claimed run
(heartbeat, complete, fail, release) matches id AND lease_token on the row's latest version.
A write that waited for a lease reclaim finds the token gone and changes nothing; a reclaim
never waits for a write in flight, it skips the row and the write's commit decides."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
import pytest

from fairlane import trigger
from fairlane.engine.sqlfiles import query
from tests.helpers import claim_params, run_row
from tests.helpers.interleave import sessions

RECLAIM = "SELECT fairlane.reclaim_expired_leases()"


def write(kind: str, run_id: int, token: UUID) -> tuple[Any, dict[str, Any]]:
    """One of the worker's fenced statements, for one run."""
    lease = {"ids": [run_id], "tokens": [token]}
    params: dict[str, dict[str, Any]] = {
        "heartbeat_runs": {**lease, "lease_s": 30.0},
        "complete_runs": {**lease, "results": ['"done"']},
        "fail_runs": {
            **lease,
            "errors": ['{"message": "boom"}'],
            "next_statuses": ["DELAYED"],
            "retry_delays": [1.0],
        },
        "release_runs": lease,
    }
    return query(kind, "fairlane"), params[kind]


def claimed_and_lapsed(db: psycopg.Connection[Any]) -> tuple[int, UUID]:
    """A run claimed by a worker whose lease has lapsed (the worker does not know yet)."""
    run_id = trigger(db, "t", None, max_attempts=3)
    params = claim_params(limit=1, worker_id="w")
    ((claimed_id, token, *_),) = db.execute(query("claim_runs", "fairlane"), params).fetchall()
    assert claimed_id == run_id
    db.execute(
        "UPDATE fairlane.runs SET lease_until = now() - interval '1 ms' WHERE id = %s", (run_id,)
    )
    return run_id, token


WRITES = ["heartbeat_runs", "complete_runs", "fail_runs", "release_runs"]


@pytest.mark.parametrize("kind", WRITES)
def test_a_write_that_waited_for_a_reclaim_changes_nothing(
    dsn: str, db: psycopg.Connection[Any], kind: str
) -> None:
    run_id, token = claimed_and_lapsed(db)
    with sessions(dsn, 2) as (reclaimer, worker):
        reclaimer.begin()
        ((outcome,),) = reclaimer.run(RECLAIM)
        assert outcome["requeued"] == 1
        statement, params = write(kind, run_id, token)
        pending = worker.start(statement, params)
        worker.blocked()
        assert worker.blockers() == [reclaimer.pid]
        reclaimer.commit()
        assert pending.result(timeout=30) == [], "the write re-checked the token and found none"
    row = run_row(db, run_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("QUEUED", 1, None)
    assert row["result"] is None
    assert row["error"]["code"] == "LEASE_EXPIRED"


@pytest.mark.parametrize("kind", WRITES)
def test_a_reclaim_skips_a_run_whose_write_is_in_flight(
    dsn: str, db: psycopg.Connection[Any], kind: str
) -> None:
    run_id, token = claimed_and_lapsed(db)
    with sessions(dsn, 2) as (worker, reclaimer):
        worker.begin()
        statement, params = write(kind, run_id, token)
        assert [row[0] for row in worker.run(statement, params)] == [run_id]
        pending = reclaimer.start(RECLAIM)
        assert not reclaimer.blocked_or_done(), "the reclaim waited for the worker's write"
        assert pending.result(timeout=30)[0][0]["requeued"] == 0
        worker.commit()
    # Decided by the write: a heartbeat renewed the lease, the others ended or handed it back.
    ((outcome,),) = db.execute(RECLAIM).fetchall()
    assert outcome["requeued"] == outcome["crashed"] == 0
    expected = {
        "heartbeat_runs": ("EXECUTING", 1),
        "complete_runs": ("COMPLETED", 1),
        "fail_runs": ("DELAYED", 1),
        "release_runs": ("QUEUED", 0),
    }
    row = run_row(db, run_id)
    assert (row["status"], row["attempts"]) == expected[kind]
