"""Waits and the completions that end them, stepped against each other transaction by
transaction: no waiting run is left behind, and no two completions deadlock.

A waiting run is set up with fairlane's own statements (claim, trigger, the wait statements of
sql/waitpoints/waiting.sql), without a worker, so each test can hold any transaction open where
it likes.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
import pytest

from fairlane import limits, trigger
from fairlane.engine.sqlfiles import query
from tests.helpers import (
    claim,
    claim_params,
    executing_run,
    insert_edges,
    run_status,
    wait_on_runs,
)
from tests.helpers.interleave import Session, sessions

Conn = psycopg.Connection[Any]


def complete(session: Session, leases: list[tuple[int, UUID]]) -> Any:
    """Start a worker's batched completion of ``leases``, in that order."""
    return session.start(
        query("complete_runs", "fairlane"),
        {
            "ids": [run for run, _ in leases],
            "tokens": [token for _, token in leases],
            "results": ["1"] * len(leases),
        },
    )


def resume_ready(db: Conn, run_id: int) -> tuple[str, bool]:
    row = db.execute(
        "SELECT status, resume_ready FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return str(row[0]), bool(row[1])


def test_siblings_finished_together_wake_their_parent(dsn: str, db: Conn) -> None:
    """Each completion checks "nothing else pending" after the other's commit is visible: the
    second one waits for the parent's row, which the first holds until it commits."""
    parent, parent_token = executing_run(db, "parent")
    first, second = executing_run(db, "child-a"), executing_run(db, "child-b")
    assert wait_on_runs(db, parent, parent_token, [first[0], second[0]]) == "WAITING"
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        complete(a, [first]).result(timeout=30)
        pending = complete(b, [second])
        b.blocked_or_done()
        a.commit()
        pending.result(timeout=30)
        b.commit()
    assert resume_ready(db, parent) == ("WAITING", True)


def test_completions_in_opposite_orders_neither_deadlock_nor_lose_a_wake_up(
    dsn: str, db: Conn
) -> None:
    """Two batched completions each finish one child of each of two parents, in opposite
    orders: the parents are locked at the end of each statement, in id order."""
    parents = [executing_run(db, f"parent-{n}") for n in range(2)]
    children = [[executing_run(db, f"child-{p}-{c}") for c in range(2)] for p in range(2)]
    for (parent, token), kids in zip(parents, children, strict=True):
        assert wait_on_runs(db, parent, token, [kid for kid, _ in kids]) == "WAITING"
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        complete(a, [children[0][0], children[1][1]]).result(timeout=30)
        pending = complete(b, [children[1][0], children[0][1]])
        b.blocked_or_done()
        a.commit()
        pending.result(timeout=30)
        b.commit()
    assert [resume_ready(db, parent) for parent, _ in parents] == [("WAITING", True)] * 2


def create_token(db: Conn) -> int:
    row = db.execute(
        query("create_token", "fairlane"), {"key": None, "key_ttl_s": 60, "timeout_s": None}
    ).fetchone()
    assert row is not None
    return int(row[0])


def complete_token_statement() -> str:
    return query("complete_token", "fairlane")


@pytest.mark.parametrize("completed_first", [True, False], ids=["completed-first", "wait-first"])
def test_a_token_completed_while_a_run_starts_waiting_on_it_wakes_the_run(
    dsn: str, db: Conn, completed_first: bool
) -> None:
    """The token's row is the meeting point: the waiter locks it (FOR SHARE) before it checks,
    and completing it updates it, so one of them waits for the other's commit."""
    parent, token = executing_run(db, "parent")
    waitpoint = create_token(db)
    complete = {"id": waitpoint, "output": '"ok"'}
    begin_waiting = {"run_id": parent, "token": token}
    with sessions(dsn, 2) as (completer, waiter):
        completer.begin()
        waiter.begin()
        if completed_first:
            completer.run(complete_token_statement(), complete)
            insert_edges(waiter, parent, [waitpoint])
            pending = waiter.start(query("begin_waiting", "fairlane"), begin_waiting)
            waiter.blocked_or_done()
            completer.commit()
            pending.result(timeout=30)
            waiter.commit()
        else:
            insert_edges(waiter, parent, [waitpoint])
            waiter.run(query("begin_waiting", "fairlane"), begin_waiting)
            pending = completer.start(complete_token_statement(), complete)
            completer.blocked_or_done()
            waiter.commit()
            pending.result(timeout=30)
            completer.commit()
    status, ready = resume_ready(db, parent)
    # Either the waiter saw the completion (and never started waiting), or it is woken.
    assert (status, ready) in {("EXECUTING", False), ("WAITING", True)}


def test_cancelling_a_parent_while_its_child_completes_does_not_deadlock(
    dsn: str, db: Conn
) -> None:
    """A completion locks the child, then the waiting parent; cancel must lock the tree in
    the same order (descendants first). A third session holds the child so that the
    completion queues on it before the cancel starts."""
    parent, parent_token = executing_run(db, "parent")
    child_id = trigger(db, "child", environment="env-parent", parent_run_id=parent)
    child = (child_id, claim(db, child_id))
    assert wait_on_runs(db, parent, parent_token, [child_id]) == "WAITING"
    with sessions(dsn, 3) as (holder, completer, canceller):
        holder.begin()
        holder.run("SELECT 1 FROM fairlane.runs WHERE id = %s FOR UPDATE", (child_id,))
        completer.begin()
        completing = complete(completer, [child])
        completer.blocked()
        canceller.begin()
        cancelling = canceller.start(query("cancel_run", "fairlane"), {"id": parent})
        canceller.blocked_or_done()
        holder.rollback()
        completing.result(timeout=30)
        completer.commit()
        assert cancelling.result(timeout=30) == [("WAITING", True, 0)]
        canceller.commit()
    assert resume_ready(db, parent)[0] == "CANCELED"


@pytest.mark.parametrize("first_commits", [True, False], ids=["first-commits", "first-rolls-back"])
def test_two_tokens_with_one_key_at_once_make_one_token(
    dsn: str, db: Conn, first_commits: bool
) -> None:
    """The second creation waits on the unique key the first holds, then returns the first's
    token (or makes its own if the first rolled back)."""
    make = query("create_token", "fairlane")
    params = {"key": "approve-7", "key_ttl_s": 3600, "timeout_s": None}
    with sessions(dsn, 2) as (a, b):
        a.begin()
        ((first,),) = a.run(make, params)
        pending = b.start(make, params)
        b.blocked()
        a.commit() if first_commits else a.rollback()
        ((second,),) = pending.result(timeout=30)
    assert (second == first) is first_commits
    tokens = db.execute("SELECT count(*) FROM fairlane.waitpoints WHERE kind = 'MANUAL'")
    assert tokens.fetchone() == (1,)


def ensure_waitpoints(session: Session, children: list[int]) -> Any:
    """Start the part of a wait transaction that finds or makes the children's waitpoints."""
    session.run(query("lock_awaited_runs", "fairlane"), {"run_ids": children})
    return session.run(query("ensure_run_waitpoints", "fairlane"), {"run_ids": children})


def test_two_waits_on_one_run_at_once_share_its_waitpoint(dsn: str, db: Conn) -> None:
    """The run's row lock (lock_awaited_runs) orders them: the second finds the waitpoint the
    first made (its ON CONFLICT alone would wait, then find nothing in its own snapshot)."""
    child, _ = executing_run(db, "child")
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        ((_, first),) = ensure_waitpoints(a, [child])
        locking = b.start(query("lock_awaited_runs", "fairlane"), {"run_ids": [child]})
        b.blocked()
        a.commit()
        locking.result(timeout=30)
        ((_, second),) = b.run(query("ensure_run_waitpoints", "fairlane"), {"run_ids": [child]})
        b.commit()
    assert second == first


@pytest.mark.parametrize("finished_first", [True, False], ids=["finish-first", "wait-first"])
def test_a_run_finishing_while_someone_starts_waiting_on_it_completes_the_wait(
    dsn: str, db: Conn, finished_first: bool
) -> None:
    """Either the run finished first and its waitpoint is made already complete, or the waiter
    marked it awaited first and the finishing statement (which waited for its row) completes
    the waitpoint."""
    child = executing_run(db, "child")
    with sessions(dsn, 2) as (finisher, waiter):
        finisher.begin()
        waiter.begin()
        if finished_first:
            complete(finisher, [child]).result(timeout=30)
            locking = waiter.start(query("lock_awaited_runs", "fairlane"), {"run_ids": [child[0]]})
            waiter.blocked()
            finisher.commit()
            locking.result(timeout=30)
            waiter.run(query("ensure_run_waitpoints", "fairlane"), {"run_ids": [child[0]]})
            waiter.commit()
        else:
            ensure_waitpoints(waiter, [child[0]])
            finishing = complete(finisher, [child])
            finisher.blocked()
            waiter.commit()
            finishing.result(timeout=30)
            finisher.commit()
    row = db.execute(
        "SELECT status, output FROM fairlane.waitpoints WHERE run_id = %s", (child[0],)
    ).fetchone()
    assert row == ("COMPLETED", 1)


def test_a_token_completed_twice_at_once_completes_once(dsn: str, db: Conn) -> None:
    """The second completion waits for the first's row version, re-checks PENDING on it and
    changes nothing: it reports False and the first output stays."""
    token = create_token(db)
    statement = complete_token_statement()
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        assert len(a.run(statement, {"id": token, "output": '"first"'})) == 1
        second = b.start(statement, {"id": token, "output": '"second"'})
        b.blocked()
        a.commit()
        assert second.result(timeout=30) == []
        b.commit()
    row = db.execute("SELECT output FROM fairlane.waitpoints WHERE id = %s", (token,)).fetchone()
    assert row == ("first",)


def test_a_resume_and_a_claim_share_a_cap_of_one(dsn: str, db: Conn) -> None:
    """A ready waiting run keeps its room reserved, and resume_run takes it under the same
    environment lock as a claim: with an environment cap of 1, a fresh run queued behind it
    does not start while the resumed one runs."""
    parent, lease = executing_run(db, "parent")
    limits.set_environment(db, "env-parent", concurrency_limit=1)
    child, _ = executing_run(db, "child")
    assert wait_on_runs(db, parent, lease, [child]) == "WAITING"
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() WHERE id = %s",
        (child,),
    )
    assert resume_ready(db, parent) == ("WAITING", True)
    fresh = trigger(db, "fresh", environment="env-parent")
    claim_fresh = claim_params(limit=1, worker_id="other", environments=["env-parent"])
    with sessions(dsn, 2) as (resumer, claimer):
        resumer.begin()
        resumed = resumer.run(query("resume_run", "fairlane"), {"run_id": parent, "token": lease})
        assert resumed == [("RESUMED",)]
        claiming = claimer.start(query("claim_runs", "fairlane"), claim_fresh)
        claimer.blocked_or_done()
        resumer.commit()
        assert claiming.result(timeout=30) == []
    executing = db.execute(
        "SELECT id FROM fairlane.runs WHERE environment = 'env-parent' AND status = 'EXECUTING'"
    ).fetchall()
    assert executing == [(parent,)]
    assert run_status(db, fresh) == "QUEUED"


def heartbeat(session: Session, leases: list[tuple[int, UUID]]) -> Any:
    return session.start(
        query("heartbeat_runs", "fairlane"),
        {
            "ids": [run for run, _ in leases],
            "tokens": [token for _, token in leases],
            "lease_s": 300,
        },
    )


def test_one_workers_heartbeat_and_outcome_writer_take_its_runs_in_one_order(
    dsn: str, db: Conn
) -> None:
    """A worker holds a waiting parent and the child it waits on. Its heartbeat extends both
    while its writer completes the child, whose completion then locks the parent: both take
    runs in descending id order (the child first), so they wait instead of deadlocking. A
    third session holds the child so the writer queues on it first."""
    parent = executing_run(db, "parent")
    child = executing_run(db, "child")
    assert wait_on_runs(db, parent[0], parent[1], [child[0]]) == "WAITING"
    with sessions(dsn, 3) as (holder, writer, beater):
        holder.begin()
        holder.run("SELECT 1 FROM fairlane.runs WHERE id = %s FOR UPDATE", (child[0],))
        completing = complete(writer, [child])
        writer.blocked()
        beating = heartbeat(beater, [parent, child])
        beater.blocked()
        holder.rollback()
        assert completing.result(timeout=30) == [(child[0],)]
        assert sorted(row[0] for row in beating.result(timeout=30)) == [parent[0]]
    assert resume_ready(db, parent[0]) == ("WAITING", True)


def test_cancelling_a_parent_while_its_children_complete_together_does_not_deadlock(
    dsn: str, db: Conn
) -> None:
    """A batched completion of two children and a cancel of their parent both lock the
    children in descending id order. A third session holds the first child so that the
    completion already holds the second when the cancel starts."""
    parent, parent_token = executing_run(db, "parent")
    children = []
    for name in ("child-a", "child-b"):
        child_id = trigger(db, name, environment="env-parent", parent_run_id=parent)
        children.append((child_id, claim(db, child_id)))
    assert wait_on_runs(db, parent, parent_token, [c for c, _ in children]) == "WAITING"
    with sessions(dsn, 3) as (holder, completer, canceller):
        holder.begin()
        holder.run("SELECT 1 FROM fairlane.runs WHERE id = %s FOR UPDATE", (children[0][0],))
        completer.begin()
        completing = complete(completer, children)
        completer.blocked()
        cancelling = canceller.start(query("cancel_run", "fairlane"), {"id": parent})
        canceller.blocked()
        holder.rollback()
        assert len(completing.result(timeout=30)) == 2
        completer.commit()
        assert cancelling.result(timeout=30) == [("WAITING", True, 0)]
    assert resume_ready(db, parent)[0] == "CANCELED"
