"""Run control stepped against other transactions: retry, reschedule and cancel decide on the
run's locked row (sql/runs/control.sql, sql/runs/cancel.sql)."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane import trigger
from fairlane.engine.sqlfiles import query
from tests.helpers import claim_params, run_status
from tests.helpers.interleave import sessions

Conn = psycopg.Connection[Any]


def test_two_retries_at_once_retry_once(dsn: str, db: Conn) -> None:
    """The second retry waits for the first's row lock, then finds the run QUEUED: it is not
    retried twice (one more attempt, not two)."""
    run = trigger(db, "t", max_attempts=1)
    db.execute(
        "UPDATE fairlane.runs SET status = 'FAILED', attempts = 1, finished_at = now()"
        " WHERE id = %s",
        (run,),
    )
    retry = query("retry_run", "fairlane")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        assert a.run(retry, {"id": run})[0][:2] == ("FAILED", True)
        second = b.start(retry, {"id": run})
        b.blocked()
        a.commit()
        assert second.result(timeout=30)[0][:2] == ("QUEUED", False)
        b.commit()
    row = db.execute("SELECT status, max_attempts FROM fairlane.runs WHERE id = %s", (run,))
    assert row.fetchone() == ("QUEUED", 2)


def test_promotion_skips_a_run_being_rescheduled(dsn: str, db: Conn) -> None:
    """A reschedule holds the delayed run's row; promotion (SKIP LOCKED) leaves it, so a run
    pushed back is not promoted on its old time."""
    run = trigger(db, "t", delay=60)
    db.execute(
        "UPDATE fairlane.runs SET available_at = now() - interval '1 s' WHERE id = %s", (run,)
    )
    with sessions(dsn, 2) as (rescheduler, promoter):
        rescheduler.begin()
        moved = rescheduler.run(
            query("reschedule_run", "fairlane"), {"id": run, "start_at": None, "delay_s": 3600}
        )
        assert moved == [("DELAYED", True)]
        promoted = promoter.run("SELECT fairlane.promote_delayed_runs()")
        assert promoted[0][0]["promoted"] == 0
        rescheduler.commit()
    assert run_status(db, run) == "DELAYED"
    later = db.execute("SELECT fairlane.promote_delayed_runs()").fetchone()
    assert later is not None
    assert later[0]["promoted"] == 0


def test_a_cancel_waits_for_a_claim_and_then_fences_its_worker(dsn: str, db: Conn) -> None:
    """Cancel locks the run: a claim in flight finishes first, and the cancel then ends the
    run and clears the lease token the claim just wrote, so that worker's writes are refused."""
    run = trigger(db, "t", environment="cancel-me")
    claim = claim_params(limit=1, worker_id="w", environments=["cancel-me"])
    with sessions(dsn, 2) as (claimer, canceller):
        claimer.begin()
        ((_, token, *_),) = claimer.run(query("claim_runs", "fairlane"), claim)
        cancelling = canceller.start(query("cancel_run", "fairlane"), {"id": run})
        canceller.blocked()
        claimer.commit()
        assert cancelling.result(timeout=30) == [("EXECUTING", True, 0)]
    written = db.execute(
        query("complete_runs", "fairlane"), {"ids": [run], "tokens": [token], "results": ["1"]}
    )
    assert written.fetchall() == []
    assert run_status(db, run) == "CANCELED"
