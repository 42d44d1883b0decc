"""The global rate limit: a token bucket in the scheduler row, refilled by elapsed time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.worker.lease_store import LeaseStore

pytestmark = pytest.mark.anyio


def take(db: psycopg.Connection[Any], requested: int, at: datetime) -> int:
    row = db.execute("SELECT fairlane.take_rate_tokens(%s, %s)", (requested, at)).fetchone()
    assert row is not None
    return int(row[0])


def bucket(db: psycopg.Connection[Any]) -> tuple[float, datetime]:
    row = db.execute("SELECT rate_tokens, rate_refilled_at FROM fairlane.scheduler").fetchone()
    assert row is not None
    return float(row[0]), row[1]


def test_bucket_refills_by_elapsed_time_up_to_its_burst(db: psycopg.Connection[Any]) -> None:
    limits.set_scheduler(db, rate_limit_per_s=10, rate_burst=10)
    tokens, start = bucket(db)
    assert tokens == 10
    assert take(db, 15, start) == 10
    assert take(db, 5, start) == 0
    assert take(db, 5, start + timedelta(seconds=0.25)) == 2  # 2.5 tokens refilled
    assert take(db, 100, start + timedelta(seconds=0.35)) == 1  # 0.5 left + 1.0 refilled
    assert take(db, 100, start + timedelta(hours=1)) == 10  # never more than the burst
    # Asking at an earlier time than the last refill neither refills nor goes backwards.
    assert take(db, 1, start) == 0


def test_rate_limit_is_off_by_default(db: psycopg.Connection[Any]) -> None:
    assert limits.scheduler_settings(db).rate_limit_per_s is None
    assert take(db, 10_000, datetime.now().astimezone()) == 10_000


async def test_claims_take_tokens_and_return_the_unused(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    trigger_many(db, [TriggerRequest("t", i) for i in range(3)])
    limits.set_scheduler(db, rate_limit_per_s=0.001, rate_burst=10)  # effectively no refill
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="test")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert len(await store.claim(conn, 50)) == 3
        tokens, _ = bucket(db)
        assert 6.99 < tokens < 7.1  # 10 granted, 3 used, 7 handed back
        trigger_many(db, [TriggerRequest("t", i) for i in range(20)])
        assert len(await store.claim(conn, 50)) == 7
        assert await store.claim(conn, 50) == []
