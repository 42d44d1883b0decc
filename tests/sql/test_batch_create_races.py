"""Batch creation under concurrent transactions: creations of one environment take turns on
its token bucket's row, and decide (tokens, idempotency key) after they hold it."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.helpers.batch_steps import create_sql
from tests.helpers.interleave import sessions


def fixed_bucket(db: psycopg.Connection[Any], environment: str, tokens: int) -> None:
    """A bucket of ``tokens`` that never refills, so every charge shows exactly."""
    db.execute(
        "INSERT INTO fairlane.environments (name, batch_refill_amount, batch_bucket_max) "
        "VALUES (%s, 0, %s)",
        (environment, tokens),
    )


def tokens_left(db: psycopg.Connection[Any], environment: str) -> float:
    row = db.execute(
        "SELECT tokens FROM fairlane.batch_buckets WHERE environment = %s", (environment,)
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_two_creations_with_one_key_make_one_batch_charged_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    fixed_bucket(db, "env", 100)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        [(made, outcome, _, _)] = a.run(*create_sql("env", 60, key="import-1"))
        assert outcome == "CREATED"
        b.begin()
        again = b.start(*create_sql("env", 60, key="import-1"))
        b.blocked()  # on the bucket's row
        a.commit()
        assert again.result(timeout=10) == [(made, "EXISTING", None, None)]
        b.commit()
    assert db.execute("SELECT count(*) FROM fairlane.batches").fetchone() == (1,)
    assert tokens_left(db, "env") == 40


def test_two_creations_cannot_both_spend_the_last_tokens(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    fixed_bucket(db, "env", 100)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        assert a.run(*create_sql("env", 60))[0][1] == "CREATED"
        b.begin()
        second = b.start(*create_sql("env", 60))
        b.blocked()
        a.commit()
        # Never refilled, so no time to retry after.
        assert second.result(timeout=10) == [(None, "RATE_LIMITED", None, 100.0)]
        b.commit()
    assert db.execute("SELECT count(*) FROM fairlane.batches").fetchone() == (1,)
    assert tokens_left(db, "env") == 40
