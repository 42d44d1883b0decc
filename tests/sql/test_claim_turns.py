"""The turn order: a claim reads the active environments a page at a time from
environments_turn_idx, looks at the environments a notification announced instead of scanning
for every one with work, and asks the environments that gave their whole share again (a lap)
when the turn order cannot fill it."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger_many
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio


def queue_runs(db: psycopg.Connection[Any], environment: str, count: int) -> list[int]:
    return trigger_many(db, [TriggerRequest("t", i, environment=environment) for i in range(count)])


def drained(db: psycopg.Connection[Any], name: str) -> bool:
    row = db.execute(
        "SELECT drained FROM fairlane.environments WHERE name = %s", (name,)
    ).fetchone()
    assert row is not None
    return bool(row[0])


async def test_an_announced_environment_joins_without_a_scan(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "busy", 20)
    queue_runs(db, "late", 2)
    queue_runs(db, "quiet", 2)
    db.execute("UPDATE fairlane.environments SET drained = name <> 'busy'")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # Known environments alone: busy fills the claim, the others stay unseen.
        got = await store.claim(conn, 2, full_scan=False)
        assert {run.environment for run in got} == {"busy"}
        got = await store.claim(conn, 4, full_scan=False, announced=["late"])
    assert {run.environment for run in got} == {"busy", "late"}
    assert sum(run.environment == "late" for run in got) == 2
    assert drained(db, "quiet"), "an environment nobody announced is not looked at"


async def test_an_announced_environment_without_work_stays_drained(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "busy", 5)
    db.execute("INSERT INTO fairlane.environments (name) VALUES ('idle')")
    db.execute("UPDATE fairlane.environments SET drained = name <> 'busy'")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await store.claim(conn, 5, full_scan=False, announced=["idle", "nowhere"])
    assert len(got) == 5
    assert drained(db, "idle")


async def test_a_lap_asks_the_environments_that_gave_their_whole_share_again(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Quantum 25: a claim of 200 over one environment with 1 run and two with 150 gives the
    first turn 100 each (an even split), then a lap takes the rest from the two deep ones."""
    queue_runs(db, "shallow", 1)
    queue_runs(db, "deep-a", 150)
    queue_runs(db, "deep-b", 150)
    # Without the cap new environments get (environment_concurrency_limit).
    db.execute("UPDATE fairlane.environments SET concurrency_limit = NULL")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await store.claim(conn, 200)
        again = await store.claim(conn, 200)
    assert len(got) == 200
    counts = {env: sum(run.environment == env for run in got) for env in ("shallow", "deep-a")}
    assert counts["shallow"] == 1
    assert 90 <= counts["deep-a"] <= 110, counts
    assert len({run.id for run in got} | {run.id for run in again}) == 301
    assert len(got) + len(again) == 301


async def test_a_claim_reads_a_page_of_the_turn_order_not_every_active_environment(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """10,000 active environments with a run each: a claim of 5 reads the turn index in order
    and stops, never sorting the active environments."""
    db.execute(
        """
        INSERT INTO fairlane.environments (name, drained)
        SELECT 'env-' || e, false FROM generate_series(1, 10000) AS e;
        INSERT INTO fairlane.queues (environment, name)
        SELECT 'env-' || e, 'default' FROM generate_series(1, 10000) AS e;
        INSERT INTO fairlane.runs (environment, queue, task, payload, status)
        SELECT 'env-' || e, 'default', 't', 'null', 'QUEUED' FROM generate_series(1, 10000) AS e;
        ANALYZE fairlane.environments;
        """
    )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        await conn.execute("SET auto_explain.log_analyze = on")
        for _ in range(7):
            assert len(await store.claim(conn, 5, full_scan=False)) == 5
    pages = [plan for plan in plans if "Query Text: SELECT array_agg(t.name" in plan]
    assert pages, "no claim read the turn order"
    for plan in pages:
        # No sort of the environments (PostgreSQL 16 and later sort the page's own few rows
        # for the ordered aggregate, by their position in it).
        assert not re.search(r"Sort Key: \(?e\.", plan), plan
        scans = re.findall(
            r"Index Scan using environments_turn_idx.*actual time=\S+ rows=(\d+)", plan
        )
        # Rows read: the page (a few environments), not the 10,000 active ones.
        assert scans, plan
        assert all(int(rows) <= 10 for rows in scans), plan
