"""Completing many tokens in one transaction of the caller's, while a worker's heartbeat
extends the leases of the runs waiting on them: neither waits for the other in a cycle.

The heartbeat locks its runs in descending id order (lock order 9, docs/concurrency.md). A
token's completion used to lock the runs waiting on it in its own statement, so a transaction
that completed tokens one statement after another locked those runs in the order of its calls:
ascending, it held the first run while the heartbeat, holding the others, waited for it, and
its next completion then waited for the heartbeat (PostgreSQL aborted one of them:
DeadlockDetected). The runs waiting on the tokens a transaction completes are now woken at its
commit, all at once, in descending id order.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
import pytest

from fairlane import waitpoints
from fairlane.engine.sqlfiles import query
from tests.helpers import executing_run, insert_edges
from tests.helpers.interleave import Session, sessions

Conn = psycopg.Connection[Any]


def waiting_on_a_token(db: Conn, task: str) -> tuple[int, UUID, int]:
    """A run that waits on a token of its own: (run id, lease token, token id)."""
    run_id, lease = executing_run(db, task)
    token = waitpoints.create_token(db)
    insert_edges(db, run_id, [token])
    state = db.execute(query("begin_waiting", "fairlane"), {"run_id": run_id, "token": lease})
    assert state.fetchone() == ("WAITING",)
    return run_id, lease, token


def heartbeat(session: Session, runs: list[tuple[int, UUID, int]]) -> Any:
    return session.start(
        query("heartbeat_runs", "fairlane"),
        {
            "ids": [run for run, _, _ in runs],
            "tokens": [lease for _, lease, _ in runs],
            "lease_s": 300,
        },
    )


def complete(session: Session, token: int) -> list[int]:
    """Complete ``token`` in the session's transaction: [token] if this call completed it."""
    rows = session.run(query("complete_token", "fairlane"), {"id": token, "output": '"ok"'})
    return [row[0] for row in rows]


def ready(db: Conn, runs: list[tuple[int, UUID, int]]) -> list[tuple[str, bool]]:
    rows = db.execute(
        "SELECT status, resume_ready FROM fairlane.runs WHERE id = ANY(%s) ORDER BY id",
        ([run for run, _, _ in runs],),
    ).fetchall()
    return [(str(status), bool(flag)) for status, flag in rows]


@pytest.mark.parametrize("count", [2, 100])
def test_tokens_completed_in_one_transaction_while_their_runs_heartbeat(
    dsn: str, db: Conn, count: int
) -> None:
    """The caller completes the tokens in ascending order of their runs; the heartbeat of
    every run starts after the first completion, the others follow it."""
    runs = [waiting_on_a_token(db, f"waiter-{n}") for n in range(count)]
    with sessions(dsn, 2) as (caller, beater):
        caller.begin()
        assert complete(caller, runs[0][2]) == [runs[0][2]]
        beating = heartbeat(beater, runs)
        beater.blocked_or_done()
        for _, _, token in runs[1:]:
            assert complete(caller, token) == [token]
        caller.commit()
        extended = beating.result(timeout=30)
    assert sorted(row[0] for row in extended) == [run for run, _, _ in runs]  # none lost
    assert ready(db, runs) == [("WAITING", True)] * count


def test_a_commit_that_wakes_runs_waits_for_their_heartbeat(dsn: str, db: Conn) -> None:
    """The wake-up at commit locks the waiting runs: it waits for a heartbeat that holds them,
    then marks them ready, with everything the transaction completed pending no more."""
    runs = [waiting_on_a_token(db, f"waiter-{n}") for n in range(3)]
    with sessions(dsn, 2) as (caller, beater):
        beater.begin()
        assert len(heartbeat(beater, runs).result(timeout=30)) == 3
        caller.begin()
        for _, _, token in reversed(runs):
            assert complete(caller, token) == [token]
        committing = caller.start("COMMIT")
        caller.blocked()
        assert ready(db, runs) == [("WAITING", False)] * 3
        beater.commit()
        committing.result(timeout=30)
    assert ready(db, runs) == [("WAITING", True)] * 3


def test_a_token_completed_and_rolled_back_wakes_nobody(dsn: str, db: Conn) -> None:
    runs = [waiting_on_a_token(db, "waiter")]
    with sessions(dsn, 1) as (caller,):
        caller.begin()
        assert complete(caller, runs[0][2]) == [runs[0][2]]
        caller.rollback()
        caller.begin()
        caller.run("SELECT 1")
        caller.commit()
    assert ready(db, runs) == [("WAITING", False)]
    assert waitpoints.get_token(db, runs[0][2]).status == "PENDING"
