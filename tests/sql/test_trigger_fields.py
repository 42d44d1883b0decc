"""A request's JSON object and the columns trigger_requests reads it into are one set of
names, and every option arrives in its column: nothing is matched by position."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from fairlane import Debounce, TriggerRequest
from fairlane.triggering.request import insert_params

EVERY_OPTION = TriggerRequest(
    "send", {"to": "a"}, environment="acme", queue="mail", priority=3, max_attempts=4,
    delay=datetime(2030, 1, 1, tzinfo=UTC), tags=["t"], metadata={"m": 1}, machine="large",
    max_duration="90s", ttl="1h", parent_run_id=7, idempotency_key="k", idempotency_ttl="2h",
    debounce=Debounce("d", "5s", mode="trailing", max_delay="1m"),
)  # fmt: skip


def test_every_field_a_request_sends_is_a_column_of_trigger_requests(
    db: psycopg.Connection[Any],
) -> None:
    (sent,) = json.loads(insert_params([EVERY_OPTION])["runs"])
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
