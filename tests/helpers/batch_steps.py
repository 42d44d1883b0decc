"""The batch statements as the engine sends them, for tests that step them by hand.

Each helper runs the named statement of ``sql/batches/`` (or the function it calls) on a
connection or an interleaving session, so a test steps exactly what ingest, a carrier and the
periodic job send.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import psycopg

from fairlane.engine.sqlfiles import query
from fairlane.triggering.api import trigger
from tests.helpers.interleave import STEP_TIMEOUT, Rows, Session

SCHEMA = "fairlane"
Statement = tuple[Any, Any]


def create_sql(
    environment: str, run_count: int, *, key: str | None = None, parent: int | None = None
) -> Statement:
    params = {
        "environment": environment,
        "run_count": run_count,
        "parent_run_id": parent,
        "idempotency_key": key,
    }
    return query("create_batch", SCHEMA), params


def create_batch(
    db: psycopg.Connection[Any], environment: str, run_count: int, *, parent: int | None = None
) -> int:
    row = db.execute(*create_sql(environment, run_count, parent=parent)).fetchone()
    assert row is not None
    assert row[1] == "CREATED", row
    return int(row[0])


def ingest_params(
    batch_id: int, indexes: Sequence[int], *, oversized: Sequence[int] = ()
) -> dict[str, Any]:
    """The parameters of ``ingest_batch_items`` for echo items at ``indexes`` (those in
    ``oversized`` marked so, as the parser sends them)."""
    return {
        "batch_id": batch_id,
        "indexes": list(indexes),
        "tasks": ["echo"] * len(indexes),
        "payloads": [None if i in oversized else json.dumps(i) for i in indexes],
        "options": ["{}"] * len(indexes),
        "oversized": [i in oversized for i in indexes],
        "made": None,
        "refusals": None,
    }


def ingest_sql(
    batch_id: int, indexes: Sequence[int], *, oversized: Sequence[int] = ()
) -> Statement:
    """The statement of one ingest slice, for a session to start."""
    return query("ingest_batch_items", SCHEMA), ingest_params(
        batch_id, indexes, oversized=oversized
    )


def ingest(db: psycopg.Connection[Any], batch_id: int, indexes: Sequence[int]) -> tuple[Any, ...]:
    """(accepted, received, run_count, sealed, status)."""
    found = db.execute(*ingest_sql(batch_id, indexes)).fetchone()
    assert found is not None
    return tuple(found)


def lock_item_sql(batch_id: int, index: int, environment: str = "env") -> Statement:
    """A carrier's first statement: the item under its row lock (a carrier of
    ``environment``, the batch's)."""
    params = {"batch_id": batch_id, "index": index, "environment": environment}
    return query("lock_batch_item", SCHEMA), params


def lock_item(session: Session, batch_id: int, index: int, environment: str = "env") -> None:
    rows = session.run(*lock_item_sql(batch_id, index, environment))
    assert rows, f"no item {index} in batch {batch_id}"
    assert rows[0][0] == "PENDING", rows


def record_item_sql(batch_id: int, index: int, run_id: int) -> Statement:
    """A carrier's last statement (sent with its COMMIT): link the run, bump the counters."""
    return "SELECT fairlane.record_batch_item(%s, %s, %s, true, NULL)", (batch_id, index, run_id)


def fail_item_sql(batch_id: int, index: int) -> Statement:
    """An item that cannot become a run (a carrier's last attempt, the orphan pass)."""
    params = {"batch_id": batch_id, "index": index, "code": "TEST", "message": "cannot"}
    return query("fail_batch_item", SCHEMA), params


ABORT_SQL = "SELECT fairlane.abort_unsealed_batches()"


def past_deadline(db: psycopg.Connection[Any], batch_id: int) -> None:
    db.execute(
        "UPDATE fairlane.batches SET seal_deadline = now() - interval '1 second' WHERE id = %s",
        (batch_id,),
    )


def plain_run(db: psycopg.Connection[Any], environment: str = "env") -> int:
    """A run as a carrier's trigger makes it, to record as an item's run."""
    return trigger(db, "echo", None, environment=environment)


def batch_state(db: psycopg.Connection[Any], batch_id: int) -> tuple[Any, ...]:
    """(status, sealed, succeeded, failed, items received)."""
    row = db.execute(
        "SELECT b.status, b.sealed, b.succeeded, b.failed, "
        "(SELECT count(*) FROM fairlane.batch_items i WHERE i.batch_id = b.id) "
        "FROM fairlane.batches b WHERE b.id = %s",
        (batch_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def item_states(db: psycopg.Connection[Any], batch_id: int) -> dict[int, str]:
    rows = db.execute(
        "SELECT index, state FROM fairlane.batch_items WHERE batch_id = %s", (batch_id,)
    ).fetchall()
    return dict(rows)


def commit_in_turn(*pending: tuple[Session, Future[Rows]]) -> None:
    """Sessions whose statements wait for one another's locks in some order: commit each as
    its statement finishes (the rest then go on). A deadlock fails here."""
    left = list(pending)
    while left:
        ready = [(s, f) for s, f in left if not s.blocked_or_done()]
        cycle = {s.name: s.blockers() for s, _ in left}
        assert ready, f"every session waits for another (a deadlock): {cycle}"
        for session, statement in ready:
            statement.result(timeout=STEP_TIMEOUT)
            session.commit()
            left.remove((session, statement))
