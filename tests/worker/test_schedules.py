"""Cron schedules: the API, the cron arithmetic (DST), catch-up, and firing exactly once per
tick across workers and concurrent firings."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, schedules
from fairlane.cron.expressions import check_cron, last_tick, next_tick
from fairlane.cron.firing import CATCH_UP_GRACE_S, fire_due_schedules, ticks_to_fire
from fairlane.engine.cron import DueSchedule
from fairlane.errors import ConfigurationError, ScheduleNotFoundError, TriggerOptionError
from tests.helpers import fast_worker, run_row, running, wait_until

pytestmark = pytest.mark.anyio

PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield conn


def _runs_of(db: psycopg.Connection[Any], key: str) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT id, task, payload, environment, queue, priority, metadata FROM fairlane.runs "
        "WHERE metadata ->> 'schedule' = %s ORDER BY metadata ->> 'tick'",
        (key,),
    ).fetchall()
    names = ("id", "task", "payload", "environment", "queue", "priority", "metadata")
    return [dict(zip(names, row, strict=True)) for row in rows]


def _set_next(db: psycopg.Connection[Any], schedule_id: int, at: datetime) -> None:
    db.execute("UPDATE fairlane.schedules SET next_fire_at = %s WHERE id = %s", (at, schedule_id))


# -- cron arithmetic ----------------------------------------------------------------------------


def test_cron_expressions_of_five_or_six_fields() -> None:
    check_cron("*/5 * * * *", "Europe/Paris")
    check_cron("*/10 * * * * *")  # seconds first
    for bad in ("* * * *", "61 * * * *", "not a cron", "* * * * * * *"):
        with pytest.raises(ConfigurationError):
            check_cron(bad)
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        check_cron("* * * * *", "Mars/Olympus")
    start = datetime(2025, 1, 1, 12, 0, 7, tzinfo=UTC)
    assert next_tick("*/10 * * * * *", "UTC", start) == start.replace(second=10)
    assert last_tick("*/10 * * * * *", "UTC", start) == start.replace(second=0)
    assert last_tick("*/5 * * * *", "UTC", start.replace(second=0)) == start.replace(second=0)


def test_ticks_are_dst_correct() -> None:
    # 02:30 does not exist in Paris on 2025-03-30 (02:00 -> 03:00): that day fires at 03:00.
    before = datetime(2025, 3, 29, 12, tzinfo=PARIS)
    days = [before]
    for _ in range(3):
        days.append(next_tick("30 2 * * *", "Europe/Paris", days[-1]))
    assert [day.astimezone(PARIS).isoformat() for day in days[1:]] == [
        "2025-03-30T03:00:00+02:00",
        "2025-03-31T02:30:00+02:00",
        "2025-04-01T02:30:00+02:00",
    ]
    # Every day at 09:00 local time is 08:00 UTC in winter and 07:00 UTC in summer.
    winter = next_tick("0 9 * * *", "Europe/Paris", datetime(2025, 3, 1, tzinfo=UTC))
    summer = next_tick("0 9 * * *", "Europe/Paris", datetime(2025, 4, 1, tzinfo=UTC))
    assert (winter.astimezone(UTC).hour, summer.astimezone(UTC).hour) == (8, 7)
    # On 2025-10-26 02:00-03:00 happens twice: an hourly schedule fires at the first 02:00
    # only, then at 03:00 (two hours later).
    hours = [datetime(2025, 10, 26, 1, 30, tzinfo=PARIS)]
    for _ in range(3):
        hours.append(next_tick("0 * * * *", "Europe/Paris", hours[-1]))
    utc_hours = [hour.astimezone(UTC).strftime("%H:%M") for hour in hours[1:]]
    assert utc_hours == ["00:00", "02:00", "03:00"]


def _due(next_fire_at: datetime, now: datetime, cron: str = "* * * * * *") -> DueSchedule:
    return DueSchedule(
        id=1,
        environment="default",
        key="k",
        task="t",
        cron=cron,
        timezone="UTC",
        payload=None,
        options={},
        next_fire_at=next_fire_at,
        now=now,
    )


def test_catch_up_fires_late_ticks_and_coalesces_missed_ones() -> None:
    now = datetime(2025, 1, 1, 12, 0, 10, 500_000, tzinfo=UTC)
    late, following = ticks_to_fire(_due(now.replace(second=7, microsecond=0), now))
    assert [tick.second for tick in late] == [7, 8, 9, 10], "a few seconds late: each tick"
    assert following == now.replace(second=11, microsecond=0)
    long_ago = now - timedelta(seconds=CATCH_UP_GRACE_S + 3600)
    missed, following = ticks_to_fire(_due(long_ago, now))
    assert missed == [now.replace(microsecond=0)], "downtime: one run, for the latest tick"
    assert following == now.replace(second=11, microsecond=0)


# -- the API ----------------------------------------------------------------------------------


def test_create_list_pause_resume_delete_trigger(db: psycopg.Connection[Any]) -> None:
    made = schedules.create(
        db,
        "send_report",
        "0 9 * * 1",
        "Europe/Paris",
        external_id="customer-7",
        payload={"customer": 7},
        environment="acme",
        queue="reports",
        priority=3,
    )
    assert (made.environment, made.key, made.task, made.cron) == (
        "acme",
        "customer-7",
        "send_report",
        "0 9 * * 1",
    )
    assert made.options == {"queue": "reports", "priority": 3}
    assert made.next_fire_at.astimezone(PARIS).strftime("%a %H:%M") == "Mon 09:00"
    again = schedules.create(
        db,
        "send_report",
        "0 9 * * 1",
        "Europe/Paris",
        external_id="customer-7",
        payload={"customer": 7, "v": 2},
        environment="acme",
    )
    assert (again.id, again.next_fire_at, again.payload) == (
        made.id,
        made.next_fire_at,
        {"customer": 7, "v": 2},
    )
    assert [s.key for s in schedules.list_schedules(db, environment="acme")] == ["customer-7"]
    assert schedules.pause(db, "customer-7", environment="acme").paused
    resumed = schedules.resume(db, "customer-7", environment="acme")
    assert not resumed.paused
    assert resumed.next_fire_at > datetime.now(UTC)
    run_id = schedules.trigger(db, "customer-7", environment="acme")
    row = run_row(db, run_id)
    assert (row["task"], row["payload"], row["environment"]) == (
        "send_report",
        {"customer": 7, "v": 2},
        "acme",
    )
    assert row["metadata"]["schedule"] == "customer-7"
    schedules.delete(db, "customer-7", environment="acme")
    with pytest.raises(ScheduleNotFoundError):
        schedules.get(db, "customer-7", environment="acme")
    with pytest.raises(ScheduleNotFoundError):
        schedules.delete(db, "customer-7", environment="acme")


def test_create_checks_everything_first(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(ConfigurationError):
        schedules.create(db, "t", "not cron", external_id="x")
    with pytest.raises(TriggerOptionError):
        schedules.create(db, "t", "* * * * *", external_id="x", max_attempts=0)
    with pytest.raises(ConfigurationError, match="trigger options"):
        schedules.create(db, "t", "* * * * *", external_id="x", delay=5)
    assert schedules.list_schedules(db) == []


# -- firing -------------------------------------------------------------------------------


async def test_each_tick_fires_once(
    db: psycopg.Connection[Any], aconn: psycopg.AsyncConnection[Any]
) -> None:
    made = schedules.create(
        db, "tick", "* * * * * *", external_id="every-second", payload={"n": 1}, queue="cron"
    )
    now = db.execute("SELECT date_trunc('second', now())").fetchone()[0]  # type: ignore[index]
    _set_next(db, made.id, now - timedelta(seconds=3))
    assert await fire_due_schedules(aconn, "fairlane") >= 4
    runs = _runs_of(db, "every-second")
    ticks = [datetime.fromisoformat(run["metadata"]["tick"]) for run in runs]
    assert ticks[:4] == [now - timedelta(seconds=3 - n) for n in range(4)]
    assert {(run["task"], run["queue"]) for run in runs} == {("tick", "cron")}
    # Pushed back onto ticks that fired already: none of them makes a second run.
    _set_next(db, made.id, now - timedelta(seconds=3))
    await fire_due_schedules(aconn, "fairlane")
    again = _runs_of(db, "every-second")
    again_ticks = [run["metadata"]["tick"] for run in again]
    assert len(again_ticks) == len(set(again_ticks)), "a tick fired twice"
    assert again[: len(runs)] == runs


async def test_concurrent_firings_make_one_run_per_tick(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    made = [schedules.create(db, "tick", "* * * * * *", external_id=f"s{n}") for n in range(5)]
    now = db.execute("SELECT date_trunc('second', now())").fetchone()[0]  # type: ignore[index]
    for schedule in made:
        _set_next(db, schedule.id, now - timedelta(seconds=20))
    connections = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(6)]
    try:
        async with anyio.create_task_group() as group:
            for conn in connections:
                group.start_soon(fire_due_schedules, conn, "fairlane")
    finally:
        for conn in connections:
            await conn.close()
    for schedule in made:
        ticks = [run["metadata"]["tick"] for run in _runs_of(db, schedule.key)]
        assert len(ticks) == len(set(ticks)) >= 21


async def test_missed_ticks_make_one_run(
    db: psycopg.Connection[Any], aconn: psycopg.AsyncConnection[Any]
) -> None:
    # One clock for every step: a real one would cross a minute boundary now and then, and
    # the tick after it would be due by the second call.
    now = datetime.now(UTC)
    made = schedules.create(db, "tick", "* * * * *", external_id="per-minute")
    _set_next(db, made.id, now - timedelta(days=1))
    assert await fire_due_schedules(aconn, "fairlane", now=now) == 1
    [run] = _runs_of(db, "per-minute")
    after = schedules.get(db, "per-minute")
    assert after.last_run_id == run["id"]
    assert after.next_fire_at > now
    assert await fire_due_schedules(aconn, "fairlane", now=now) == 0


async def test_catch_up_in_a_repeated_hour_fires_no_tick_before_its_time(
    db: psycopg.Connection[Any], aconn: psycopg.AsyncConnection[Any]
) -> None:
    # Berlin, 2026-10-25: at 01:00Z the clock goes back from 03:00 CEST to 02:00 CET. A
    # daily 02:00 schedule, its workers down since the day before, comes back at 00:59:40Z,
    # 20 s before the second 02:00.
    made = schedules.create(db, "tick", "0 2 * * *", "Europe/Berlin", external_id="nightly")
    _set_next(db, made.id, datetime(2026, 10, 24, 0, tzinfo=UTC))  # yesterday's 02:00 CEST
    back = datetime(2026, 10, 25, 0, 59, 40, tzinfo=UTC)
    assert await fire_due_schedules(aconn, "fairlane", now=back) == 1
    [run] = _runs_of(db, "nightly")
    tick = datetime.fromisoformat(run["metadata"]["tick"])
    assert tick <= back, "a run fired for a tick still to come"
    assert tick == datetime(2026, 10, 25, 0, tzinfo=UTC), "the day's (first) 02:00"
    after = schedules.get(db, "nightly")
    assert after.next_fire_at == datetime(2026, 10, 26, 1, tzinfo=UTC), "the next day's 02:00"
    # The second 02:00 passes: the wall time fired already, nothing more fires.
    for at in (datetime(2026, 10, 25, 1, 0, 5, tzinfo=UTC), after.next_fire_at):
        await fire_due_schedules(aconn, "fairlane", now=at)
    ticks = [datetime.fromisoformat(run["metadata"]["tick"]) for run in _runs_of(db, "nightly")]
    assert ticks == [tick, after.next_fire_at]


async def test_three_workers_fire_a_declared_every_second_schedule_once_per_tick(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    def registry() -> TaskRegistry:
        tasks = TaskRegistry()

        @tasks.task(cron="* * * * * *", queue="beat")
        async def beat(ctx: RunContext, payload: None) -> str:
            return str(ctx.metadata["tick"])

        return tasks

    workers = [fast_worker(registry(), dsn, periodic_interval=0.1) for _ in range(3)]
    async with running(*workers):
        await wait_until(
            lambda: len(_runs_of(db, "task:beat")) >= 4, within=30, what="four ticks fired"
        )
    [declared] = schedules.list_schedules(db)
    assert (declared.key, declared.declared, declared.options) == (
        "task:beat",
        True,
        {"queue": "beat"},
    )
    runs = _runs_of(db, "task:beat")
    ticks = [datetime.fromisoformat(run["metadata"]["tick"]) for run in runs]
    assert len(ticks) >= 3
    assert len(ticks) == len(set(ticks)), "no tick fired twice"
    gaps = {later - earlier for earlier, later in itertools.pairwise(ticks)}
    assert gaps == {timedelta(seconds=1)}, "no tick skipped while the workers ran"
    # A worker stopped while its fire's COMMIT is on the wire may not have counted that fire's
    # one run (the commit took; the count never ran): each can be one short, none over.
    counted = sum(worker.stats.scheduled_runs for worker in workers)
    assert len(runs) - len(workers) <= counted <= len(runs)


def test_cli_schedules(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from fairlane.cli import main

    base = ["--dsn", dsn, "--environment", "acme"]
    create = [
        "schedules",
        "create",
        "c-1",
        "report",
        "0 9 * * *",
        "--timezone",
        "Europe/Paris",
        "--payload",
        '{"c": 1}',
        "--queue",
        "reports",
    ]
    assert main([*create, *base]) == 0
    assert main(["schedules", "pause", "c-1", *base]) == 0
    assert "paused" in capsys.readouterr().out.splitlines()[-1]
    assert main(["schedules", "resume", "c-1", *base]) == 0
    assert main(["schedules", "trigger", "c-1", *base]) == 0
    run_id = json.loads(capsys.readouterr().out.splitlines()[-1])["run_id"]
    assert run_row(db, run_id)["queue"] == "reports"
    assert main(["schedules", "list", "--dsn", dsn]) == 0
    listed = capsys.readouterr().out
    assert "c-1" in listed
    assert "Europe/Paris" in listed
    assert main(["schedules", "delete", "c-1", *base]) == 0
    assert main(["schedules", "delete", "c-1", *base]) == 3, "an unknown schedule: not found"
    assert schedules.list_schedules(db) == []


async def test_a_broken_schedule_row_does_not_stop_the_others(
    db: psycopg.Connection[Any], aconn: psycopg.AsyncConnection[Any]
) -> None:
    # Yearly: whenever the test runs, no second tick falls between ``past`` and now (with
    # every minute, a run in the first 5 s of a minute fired two ticks).
    good = schedules.create(db, "tick", "0 0 1 1 *", external_id="good")
    bad = schedules.create(db, "tick", "0 0 1 1 *", external_id="bad")
    db.execute("UPDATE fairlane.schedules SET cron = 'nonsense' WHERE id = %s", (bad.id,))
    past = datetime.now(UTC) - timedelta(seconds=5)
    for schedule in (good, bad):
        _set_next(db, schedule.id, past)
    assert await fire_due_schedules(aconn, "fairlane") == 1
    assert len(_runs_of(db, "good")) == 1
    assert _runs_of(db, "bad") == []
