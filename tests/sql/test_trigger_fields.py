"""A request's JSON object and the columns trigger_requests reads it into are one set of
names, and every option arrives in its column: nothing is matched by position."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from fairlane import Debounce, TriggerRequest, trigger
from fairlane.engine.statement import rows, rows_async
from fairlane.triggering.api import trigger_statement
from fairlane.triggering.request import insert_params
from tests.helpers import log_nested_plans

EVERY_OPTION = TriggerRequest(
    "send",
    {"to": "a"},
    environment="acme",
    queue="mail",
    priority=3,
    max_attempts=4,
    delay=datetime(2030, 1, 1, tzinfo=UTC),
    tags=["t"],
    metadata={"m": 1},
    machine="large",
    max_duration="90s",
    ttl="1h",
    parent_run_id=7,
    idempotency_key="k",
    idempotency_ttl="2h",
    debounce=Debounce("d", "5s", mode="trailing", max_delay="1m"),
    concurrency_key="user-1",
)


def test_every_field_a_request_sends_is_a_column_of_trigger_requests(
    db: psycopg.Connection[Any],
) -> None:
    # The parent is a run of the request's environment: any other is refused (docs/security.md).
    parent = trigger(db, "parent", environment="acme")
    (sent,) = json.loads(insert_params([replace(EVERY_OPTION, parent_run_id=parent)])["runs"])
    cursor = db.execute("SELECT * FROM fairlane.trigger_requests(%s::jsonb)", (json.dumps([sent]),))
    columns = [column.name for column in cursor.description or ()]
    assert set(sent) == set(columns) - {"ord", "delay_s"}, "every option given has its column"
    row = dict(zip(columns, cursor.fetchone() or (), strict=True))
    for name, value in sent.items():
        read = row[name]
        if isinstance(read, datetime):
            read = read.isoformat()
        assert read == value, name


def test_a_delay_in_seconds_arrives_in_delay_s(db: psycopg.Connection[Any]) -> None:
    (sent,) = json.loads(insert_params([TriggerRequest("t", delay=5)])["runs"])
    assert sent["delay_s"] == 5
    row = db.execute(
        "SELECT delay_s, delay_until FROM fairlane.trigger_requests(%s::jsonb)",
        (json.dumps([sent]),),
    ).fetchone()
    assert row == (5.0, None)


def test_a_request_at_its_defaults_sends_its_task_alone() -> None:
    (sent,) = json.loads(insert_params([TriggerRequest("t")])["runs"])
    assert sent == {"task": "t"}
    (named,) = json.loads(insert_params([TriggerRequest("t", environment="default")])["runs"])
    assert named == {"task": "t"}, "a default given by name is the default"


def test_trigger_requests_fills_in_what_a_request_left_out(db: psycopg.Connection[Any]) -> None:
    row = db.execute(
        "SELECT environment, queue, priority, payload FROM fairlane.trigger_requests(%s::jsonb)",
        (json.dumps([{"task": "t"}]),),
    ).fetchone()
    assert row == ("default", "default", 0, None)


def test_runs_left_at_their_defaults_are_stored_as_runs_that_give_them(
    db: psycopg.Connection[Any],
) -> None:
    """Both trigger statements (plain and keyed) store the same run for a request that leaves
    its defaults out as for one that gives them (as an earlier client sent them)."""
    given = {"environment": "default", "queue": "default", "priority": 0, "payload": None}
    plain = trigger_statement([TriggerRequest("t")], schema="fairlane")
    sent = [{"task": "t"}, {"task": "t", **given}]
    rows(db, replace(plain, params={"runs": json.dumps(sent)}))
    keyed = trigger_statement([TriggerRequest("t", idempotency_key="a")], schema="fairlane")
    sent = [{"task": "t", "idempotency_key": "a"}, {"task": "t", "idempotency_key": "b", **given}]
    rows(db, replace(keyed, params={"runs": json.dumps(sent)}))
    stored = db.execute(
        "SELECT environment, queue, priority, payload = 'null'::jsonb, queue_order - queued_at"
        " FROM fairlane.runs ORDER BY id"
    ).fetchall()
    assert len(stored) == 4
    assert set(stored) == {("default", "default", 0, True, timedelta(0))}


@pytest.mark.anyio
async def test_a_sessions_first_plain_trigger_runs_on_a_plan_made_for_any_requests(
    dsn: str,
) -> None:
    """insert_runs is planned once per session: the plan of the first call already takes the
    requests as a parameter. Sent as a statement it was planned for each call with the JSON
    written into the plan, ten times or so per connection and on every call where nothing is
    prepared (behind a transaction-pooling PgBouncer)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        await conn.execute("SET auto_explain.log_verbose = on")
        statement = trigger_statement([TriggerRequest("t")], schema="fairlane")
        (made,) = await rows_async(conn, statement)
    assert made.ids is not None
    assert len(made.ids) == 1
    inserting = [plan for plan in plans if "Insert on fairlane.runs" in plan]
    assert len(inserting) == 1, plans
    assert "Function Call: jsonb_to_recordset($1)" in inserting[0], inserting[0]
