"""Trigger calls stepped through ``tests.helpers.interleave`` sessions: the statement
``trigger_many`` sends, sent from a session's own connection inside the transaction the test
holds open."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import psycopg

from fairlane import TriggerRequest
from fairlane.triggering.api import trigger_statement
from tests.helpers.interleave import Rows, Session


def start_many(session: Session, requests: Sequence[TriggerRequest]) -> Future[Rows]:
    """Send one ``trigger_many`` call from ``session``; the future's rows are the statement's."""
    statement = trigger_statement(requests)
    return session.start(statement.sql, dict(statement.params or {}))


def made(rows: Rows) -> list[int]:
    """The runs a call made or found, from either statement's rows (the plain one returns its
    ids as one array, the keyed one a row per request); fails on a refusal."""
    assert rows, "the call returned no row"
    assert all(row[0] is not None or row[1] is not None for row in rows), f"refused: {rows}"
    return [int(run) for row in rows for run in (row[1] if row[1] is not None else [row[0]])]


def ids_of(rows: Rows) -> list[int]:
    """Run ids in request order from a keyed call's rows (item is the last column)."""
    assert all(row[0] is not None for row in rows), f"a request was refused: {rows}"
    return [int(row[0]) for row in sorted(rows, key=lambda row: int(row[-1]))]


def settings_rows(db: psycopg.Connection[Any], environment: str, *queues: str) -> None:
    """Make an environment's and its queues' rows (a first trigger would), committed, so that
    a test's sessions do not wait for each other there."""
    db.execute(
        "INSERT INTO fairlane.environments (name) VALUES (%s) ON CONFLICT DO NOTHING",
        (environment,),
    )
    for queue in queues:
        db.execute(
            "INSERT INTO fairlane.queues (environment, name) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (environment, queue),
        )
