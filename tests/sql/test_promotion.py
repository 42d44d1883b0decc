"""Delayed promotion: bounded batches looped within a tick, one announcement per environment,
and what it decides under concurrent sessions (SKIP LOCKED, re-checked on the latest row)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, maintenance, trigger_many
from tests.helpers import announced, statuses
from tests.helpers.interleave import sessions

PROMOTE = "SELECT fairlane.promote_delayed_runs()"


def delayed(db: psycopg.Connection[Any], count: int, **options: Any) -> list[int]:
    requests = [TriggerRequest("t", i, delay=3600, **options) for i in range(count)]
    return trigger_many(db, requests)


def make_due(db: psycopg.Connection[Any], run_ids: list[int] | None = None) -> None:
    db.execute(
        "UPDATE fairlane.runs SET available_at = now() - interval '1 s'"
        " WHERE status = 'DELAYED' AND (%s::bigint[] IS NULL OR id = ANY(%s::bigint[]))",
        (run_ids, run_ids),
    )


def promote(db: psycopg.Connection[Any]) -> dict[str, int]:
    row = db.execute(PROMOTE).fetchone()
    assert row is not None
    return dict(row[0])


def test_twenty_thousand_runs_due_at_once_are_promoted_in_one_tick(
    db: psycopg.Connection[Any],
) -> None:
    """The seeded settings (5,000 per statement, 10 statements) take them in one call; a tick
    of the old single 1,000-run statement took twenty."""
    delayed(db, 20_000)
    make_due(db)
    # Four full statements, and a fifth that found nothing more to do.
    assert promote(db) == {"promoted": 20_000, "statements": 5, "woken": 1, "behind": False}
    assert statuses(db) == {"QUEUED": 20_000}


def test_a_tick_is_bounded_by_the_batch_settings(db: psycopg.Connection[Any]) -> None:
    delayed(db, 1000)
    make_due(db)
    maintenance.set_setting(db, "promote_batch_size", 100)
    maintenance.set_setting(db, "promote_max_batches", 3)
    ticks = []
    while (outcome := promote(db))["promoted"]:
        ticks.append(outcome)
    assert [tick["promoted"] for tick in ticks] == [300, 300, 300, 100]
    assert all(tick["statements"] <= 3 for tick in ticks)
    # Stopped by the statement cap with work left: the runner makes such a tick due again.
    assert [tick["behind"] for tick in ticks] == [True, True, True, False]
    assert outcome == {"promoted": 0, "statements": 1, "woken": 0, "behind": False}
    assert statuses(db) == {"QUEUED": 1000}


def test_each_environment_is_announced_once_per_tick(db: psycopg.Connection[Any]) -> None:
    for environment in ("a", "b", "c"):
        delayed(db, 50, environment=environment)
    delayed(db, 5, environment="later")  # not due
    make_due(
        db,
        [
            row[0]
            for row in db.execute(
                "SELECT id FROM fairlane.runs WHERE environment <> 'later'"
            ).fetchall()
        ],
    )
    maintenance.set_setting(db, "promote_batch_size", 40)  # four statements, mixed environments
    db.execute('LISTEN "fairlane.runs"')
    assert promote(db) == {"promoted": 150, "statements": 4, "woken": 3, "behind": False}
    assert announced(db) == ["a", "b", "c"]


def test_two_promotions_at_once_share_the_runs_without_waiting(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Two sessions running the job (pg_cron beside a worker, or by hand): the second skips
    the rows the first holds instead of waiting for them, and no run is promoted twice."""
    delayed(db, 300)
    make_due(db)
    maintenance.set_setting(db, "promote_batch_size", 100)
    maintenance.set_setting(db, "promote_max_batches", 2)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        b.begin()
        ((first,),) = a.run(PROMOTE)
        pending = b.start(PROMOTE)
        assert not b.blocked_or_done(), "the second promotion waited for the first"
        ((second,),) = pending.result()
        a.commit()
        b.commit()
    assert (first["promoted"], second["promoted"]) == (200, 100)
    assert statuses(db) == {"QUEUED": 300}


def test_a_run_being_rescheduled_is_skipped_then_decided_on_its_new_time(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    (run_id,) = delayed(db, 1)
    make_due(db)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        a.run("SELECT * FROM fairlane.reschedule_run(%s, now() + interval '1 hour')", (run_id,))
        pending = b.start(PROMOTE)
        assert not b.blocked_or_done()
        assert pending.result()[0][0]["promoted"] == 0
        a.commit()
    assert promote(db)["promoted"] == 0  # due in an hour now
    assert statuses(db) == {"DELAYED": 1}


def test_a_reschedule_waiting_for_a_promotion_sees_the_run_queued(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    (run_id,) = delayed(db, 1)
    make_due(db)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        assert a.run(PROMOTE)[0][0]["promoted"] == 1
        pending = b.start(
            "SELECT * FROM fairlane.reschedule_run(%s, now() + interval '1 hour')", (run_id,)
        )
        b.blocked()
        a.commit()
        assert pending.result() == [("QUEUED", False)]
    assert statuses(db) == {"QUEUED": 1}


@pytest.mark.parametrize("setting", ["promote_batch_size", "promote_max_batches"])
def test_the_settings_are_seeded_and_described(db: psycopg.Connection[Any], setting: str) -> None:
    (found,) = [item for item in maintenance.list_settings(db) if item.name == setting]
    assert isinstance(found.value, int)
    assert found.value > 0
    assert "promote_delayed_runs" in found.description
