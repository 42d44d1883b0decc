"""Environments created on the fly start at the setting environment_concurrency_limit (100, as
the seeds' system starts each), and the batch token bucket refills 10 items per 10 s up to
1,200 (seed 004)."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane import TriggerRequest, limits, trigger, trigger_many


def limit_of(db: psycopg.Connection[Any], environment: str) -> int | None:
    row = db.execute(
        "SELECT concurrency_limit FROM fairlane.environments WHERE name = %s", (environment,)
    ).fetchone()
    assert row is not None
    return None if row[0] is None else int(row[0])


def setting(db: psycopg.Connection[Any], name: str) -> Any:
    row = db.execute("SELECT value FROM fairlane.settings WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return row[0]


def test_an_environment_a_trigger_creates_starts_at_the_default_limit(
    db: psycopg.Connection[Any],
) -> None:
    assert setting(db, "environment_concurrency_limit") == 100
    trigger(db, "t", environment="plain")
    trigger(db, "t", environment="keyed", idempotency_key="k")
    trigger_many(db, [TriggerRequest("t", environment="many")])
    assert [limit_of(db, name) for name in ("plain", "keyed", "many")] == [100, 100, 100]


def test_the_default_is_configurable_and_null_leaves_new_environments_unlimited(
    db: psycopg.Connection[Any],
) -> None:
    db.execute(
        "UPDATE fairlane.settings SET value = '5' WHERE name = 'environment_concurrency_limit'"
    )
    trigger(db, "t", environment="five")
    db.execute(
        "UPDATE fairlane.settings SET value = 'null' WHERE name = 'environment_concurrency_limit'"
    )
    trigger(db, "t", environment="unlimited")
    assert (limit_of(db, "five"), limit_of(db, "unlimited")) == (5, None)


def test_an_environment_keeps_its_own_limit(db: psycopg.Connection[Any]) -> None:
    limits.set_environment(db, "own", concurrency_limit=None)
    limits.set_environment(db, "paused", paused=True)
    trigger(db, "t", environment="own")
    assert (limit_of(db, "own"), limit_of(db, "paused")) == (None, 100)


def test_the_batch_bucket_defaults_are_the_seeds(db: psycopg.Connection[Any]) -> None:
    assert [
        setting(db, name)
        for name in ("batch_refill_amount", "batch_refill_interval_s", "batch_bucket_max")
    ] == [10, 10, 1200]
