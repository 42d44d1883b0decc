"""Delay (point 1): seconds, timedelta, duration strings or an absolute time; rescheduling a
run while it is still DELAYED; malformed durations refused with a typed error naming them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, Client, RunStatus, TriggerRequest
from fairlane.durations import parse_duration_string, seconds
from fairlane.errors import (
    InvalidDurationError,
    RunNotDelayedError,
    RunNotFoundError,
    TriggerOptionError,
)
from tests.helpers import run_status


def starts_in(db: psycopg.Connection[Any], run_id: int) -> timedelta:
    row = db.execute(
        "SELECT available_at - now() FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    assert isinstance(row[0], timedelta)
    return row[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5s", 5),
        ("1m", 60),
        ("2h30m", 9000),
        ("1h 30m", 5400),
        ("1.5h", 5400),
        ("500ms", 0.5),
        ("1d", 86_400),
        ("1w", 604_800),
        ("90", 90),
        (" 10S ", 10),
        ("1h1m1s", 3661),
    ],
)
def test_duration_strings(text: str, expected: float) -> None:
    assert parse_duration_string("delay", text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "bad", ["", " ", "abc", "5x", "-5s", "5s-", "1h30", "s", "5 s m", "1e3s", "1,5h", "∞s"]
)
def test_malformed_duration_is_a_typed_error_naming_the_value(bad: str) -> None:
    with pytest.raises(InvalidDurationError) as refused:
        seconds("delay", bad)
    assert refused.value.value == bad
    assert refused.value.option == "delay"
    assert repr(bad) in str(refused.value)
    assert isinstance(refused.value, TriggerOptionError)


@pytest.mark.parametrize("option", ["delay", "ttl", "max_duration", "idempotency_ttl"])
def test_every_duration_option_refuses_malformed_strings_before_sending(
    dsn: str, db: psycopg.Connection[Any], option: str
) -> None:
    options: dict[str, Any] = {option: "2 fortnights"}
    requests = [TriggerRequest("send", 0), TriggerRequest("send", 1)]
    requests.append(TriggerRequest("send", 2, idempotency_key="k", **options))
    with psycopg.connect(dsn) as conn:
        with pytest.raises(InvalidDurationError) as refused:
            fairlane.trigger_many(conn, requests)
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert (refused.value.option, refused.value.value, refused.value.index) == (
        option,
        "2 fortnights",
        2,
    )
    assert "(item 2)" in str(refused.value)
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("delay", "expected"),
    [("90s", 90), ("2h30m", 9000), (timedelta(minutes=3), 180), (45, 45), (12.5, 12.5)],
)
def test_delay_forms(dsn: str, db: psycopg.Connection[Any], delay: Any, expected: float) -> None:
    with Client(dsn) as client:
        run = client.get_run(client.trigger("send", None, delay=delay))
    assert run.status is RunStatus.DELAYED
    assert timedelta(seconds=expected - 5) < starts_in(db, run.id) <= timedelta(seconds=expected)


def test_delay_until_an_absolute_time(dsn: str, db: psycopg.Connection[Any]) -> None:
    now = db.execute("SELECT now()").fetchone()
    assert now is not None
    at = now[0] + timedelta(hours=2)
    with Client(dsn) as client:
        later = client.get_run(client.trigger("send", None, delay=at))
        past = client.get_run(client.trigger("send", None, delay=now[0] - timedelta(minutes=1)))
    assert (later.status, later.available_at) == (RunStatus.DELAYED, at)
    # A time already past starts the run at once.
    assert (past.status, past.available_at) == (RunStatus.QUEUED, None)


def test_naive_datetime_is_refused(dsn: str) -> None:
    with Client(dsn) as client, pytest.raises(TriggerOptionError) as refused:
        client.trigger("send", None, delay=datetime(2030, 1, 1))
    assert refused.value.option == "delay"


@pytest.mark.anyio
async def test_reschedule_while_delayed(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("send", None, delay="1h")
        later = await client.reschedule(run_id, "3h")
        assert later.status is RunStatus.DELAYED
        assert timedelta(hours=3) - timedelta(seconds=5) < starts_in(db, run_id)
        # Earlier works too, down to now: the next promotion makes it claimable.
        await client.reschedule(run_id, 0)
        db.execute("SELECT fairlane.promote_delayed_runs()")
        assert run_status(db, run_id) is RunStatus.QUEUED
        with pytest.raises(RunNotDelayedError) as refused:
            await client.reschedule(run_id, "1m")
        assert (refused.value.run_id, refused.value.status) == (run_id, "QUEUED")
        with pytest.raises(RunNotFoundError):
            await client.reschedule(run_id + 1000, "1m")


def test_reschedule_to_an_absolute_time_sync(dsn: str) -> None:
    at = datetime.now(UTC) + timedelta(days=2)
    with Client(dsn) as client:
        run_id = client.trigger("send", None, delay="1m")
        assert client.reschedule(run_id, at).available_at == at
        with pytest.raises(InvalidDurationError):
            client.reschedule(run_id, "soon")
