"""The batch statements as the engine sends them, for tests that step them by hand.

Each helper runs the named statement of ``sql/batches.sql`` (or the function it calls) on a
connection or an interleaving session, so a test steps exactly what ingest, a carrier and the
periodic job send.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from fairlane.enqueue import trigger
from fairlane.sqlfiles import query
from tests.interleave import Session

SCHEMA = "fairlane"


def create_batch(db: psycopg.Connection[Any], environment: str, run_count: int) -> int:
    row = db.execute(
        query("create_batch", SCHEMA),
        {
            "environment": environment, "run_count": run_count, "parent_run_id": None,
            "idempotency_key": None,
        },
    ).fetchone()  # fmt: skip
    assert row is not None
    assert row[1] == "CREATED", row
    return int(row[0])


def ingest_params(batch_id: int, indexes: Sequence[int], task: str = "echo") -> dict[str, Any]:
    """The parameters of ``ingest_batch_items`` for plain items at ``indexes``."""
    return {
        "batch_id": batch_id, "indexes": list(indexes), "tasks": [task] * len(indexes),
        "payloads": [json.dumps(i) for i in indexes], "options": ["{}"] * len(indexes),
        "oversized": [False] * len(indexes),
    }  # fmt: skip


def ingest_sql(batch_id: int, indexes: Sequence[int]) -> tuple[Any, dict[str, Any]]:
    """The statement of one ingest slice, for a session to start."""
    return query("ingest_batch_items", SCHEMA), ingest_params(batch_id, indexes)


def ingest(db: psycopg.Connection[Any], batch_id: int, indexes: Sequence[int]) -> tuple[Any, ...]:
    """(accepted, received, run_count, sealed, status)."""
    row = db.execute(query("ingest_batch_items", SCHEMA), ingest_params(batch_id, indexes))
    found = row.fetchone()
    assert found is not None
    return tuple(found)


def lock_item(session: Session, batch_id: int, index: int) -> None:
    """A carrier's first statement: the item under its row lock."""
    rows = session.run(query("lock_batch_item", SCHEMA), {"batch_id": batch_id, "index": index})
    assert rows, f"no item {index} in batch {batch_id}"
    assert rows[0][0] == "PENDING", rows


def record_item_sql(batch_id: int, index: int, run_id: int) -> tuple[str, tuple[int, ...]]:
    """A carrier's last statement (sent with its COMMIT): link the run, bump the counters."""
    return "SELECT fairlane.record_batch_item(%s, %s, %s, true, NULL)", (batch_id, index, run_id)


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
