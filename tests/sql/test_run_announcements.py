"""The changes channel the event streams follow (sql/realtime/changes.sql): every run that is
created or changes status is announced once per change, whichever statement changed it. The
claim and the worker's completions announce their runs themselves, a notice per 300; the row
trigger announces every other change and passes over those two transitions when the statement
said it announced them, so no run is announced twice for one change, and none is left out: not
even one a worker of an earlier release completes during a rolling deploy."""

from __future__ import annotations

from collections import Counter
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.engine.sqlfiles import changes_channel_name, query
from tests.helpers import claim_params

CHANNEL = changes_channel_name("fairlane")
END = "end"
# A payload holds at most 8,000 bytes; 300 ids of up to 20 bytes each stay under it.
MOST_IDS_PER_NOTICE = 300


@pytest.fixture
def listener(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(CHANNEL)))
        yield conn


def announced(listener: psycopg.Connection[Any], db: psycopg.Connection[Any]) -> list[list[int]]:
    """The notices since the last call, each as its ids: read up to a marker ``db`` sends
    last, so every notice committed before it has arrived (one session's notices arrive in
    commit order)."""
    db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, END))
    notices: list[list[int]] = []
    for notice in listener.notifies(timeout=30):
        if notice.payload == END:
            return notices
        assert len(notice.payload.encode()) <= 8000
        notices.append([int(part) for part in notice.payload.split(",")])
    raise AssertionError("the marker never arrived")


def each_once(notices: list[list[int]]) -> Counter[int]:
    assert all(len(ids) <= MOST_IDS_PER_NOTICE for ids in notices)
    return Counter(run_id for ids in notices for run_id in ids)


def test_every_change_of_a_run_is_announced_once(
    db: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "e", concurrency_limit=1000)
    created = trigger_many(db, [TriggerRequest("t", i, environment="e") for i in range(700)])
    assert each_once(announced(listener, db)) == Counter(created)

    # The claim: 700 runs started in one statement, a notice per 300 of them.
    rows = db.execute(query("claim_runs", "fairlane"), claim_params(limit=700)).fetchall()
    claimed = {row[0]: row[1] for row in rows}
    assert sorted(claimed) == sorted(created)
    notices = announced(listener, db)
    assert each_once(notices) == Counter(created)
    assert len(notices) == 3

    # The worker's completions (announced by the statement) and failures (by the row trigger).
    done, failed = created[:650], created[650:]
    completed = db.execute(
        query("complete_runs", "fairlane"),
        {"ids": done, "tokens": [claimed[i] for i in done], "results": ["1"] * len(done)},
    ).fetchall()
    assert len(completed) == len(done)
    db.execute(
        query("fail_runs", "fairlane"),
        {
            "ids": failed,
            "tokens": [claimed[i] for i in failed],
            "errors": ['{"message": "boom"}'] * len(failed),
            "next_statuses": ["FAILED"] * len(failed),
            "retry_delays": [0.0] * len(failed),
        },
    )
    assert each_once(announced(listener, db)) == Counter(created)


def test_a_completion_the_fence_refuses_announces_nothing(
    db: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    (run_id,) = trigger_many(db, [TriggerRequest("t", None)])
    ((claimed_id, token, *_),) = db.execute(
        query("claim_runs", "fairlane"), claim_params(limit=1)
    ).fetchall()
    assert claimed_id == run_id
    announced(listener, db)

    stale = db.execute(
        query("complete_runs", "fairlane"),
        {"ids": [run_id], "tokens": [uuid4()], "results": ["1"]},
    ).fetchall()
    assert stale == []
    assert announced(listener, db) == []

    db.execute(
        query("complete_runs", "fairlane"),
        {"ids": [run_id], "tokens": [token], "results": ["1"]},
    )
    assert announced(listener, db) == [[run_id]]


def test_other_changes_of_status_and_metadata_are_announced_by_the_row_trigger(
    db: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    (run_id,) = trigger_many(db, [TriggerRequest("t", None)])
    announced(listener, db)
    # A status the claim and completions never write, and a metadata change alone.
    db.execute("UPDATE fairlane.runs SET status = 'CANCELED' WHERE id = %s", (run_id,))
    db.execute("UPDATE fairlane.runs SET metadata = '{\"a\": 1}' WHERE id = %s", (run_id,))
    # Nothing a stream shows: no notice.
    db.execute("UPDATE fairlane.runs SET priority = 5 WHERE id = %s", (run_id,))
    assert announced(listener, db) == [[run_id], [run_id]]


def test_a_completion_that_announces_nothing_is_announced_by_the_row_trigger(
    db: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    """A worker of the release before set-based announcements completes with a statement that
    announces nothing; a claim made just before, in a transaction of its own, does not make
    the trigger pass over it."""
    (run_id,) = trigger_many(db, [TriggerRequest("t", None)])
    ((claimed_id, token, *_),) = db.execute(
        query("claim_runs", "fairlane"), claim_params(limit=1)
    ).fetchall()
    assert claimed_id == run_id
    assert announced(listener, db) == [[run_id], [run_id]]

    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now(), lease_token = NULL,"
        " lease_until = NULL WHERE id = %s AND lease_token = %s AND status = 'EXECUTING'",
        (run_id, token),
    )
    assert announced(listener, db) == [[run_id]]
