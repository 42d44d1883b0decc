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


def rounds_in(plans: list[str]) -> int:
    """How many rounds the claims whose plans these are made: one pick statement each."""
    return sum("Query Text: WITH kept AS MATERIALIZED" in plan for plan in plans)


async def test_a_claim_sizes_its_first_page_by_the_last_claims_yield(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Twenty environments with two runs each: the session's first claim of 10 reads one
    environment (the page follows the quantum, 25), then the four it still needs; the next
    claims read five at once, in one round, and serve the turn order the same way."""
    for i in range(20):
        queue_runs(db, f"env-{i:02d}", 2)
    db.execute("UPDATE fairlane.environments SET concurrency_limit = NULL")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        first = await store.claim(conn, 10, full_scan=True)
        first_rounds = rounds_in(plans)
        plans.clear()
        second = await store.claim(conn, 10, full_scan=False)
        second_rounds = rounds_in(plans)
        plans.clear()
        third = await store.claim(conn, 10, full_scan=False)
        third_rounds = rounds_in(plans)
    assert (first_rounds, second_rounds, third_rounds) == (2, 1, 1)
    for claimed in (first, second, third):
        assert len(claimed) == 10
        # Each environment gave both its runs, five environments a claim.
        assert len({run.environment for run in claimed}) == 5
    served = {run.environment for run in [*first, *second, *third]}
    assert len(served) == 15, "no environment served twice while others waited"


async def test_a_session_that_claimed_from_shallow_environments_still_gives_a_turn_its_share(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """The remembered yield only widens a page: after claims over environments with a run
    each, a claim over deep ones takes its runs from the first in turn order, as DRR's
    quantum (25) allows, and the next claims learn the higher yield."""
    for i in range(10):
        queue_runs(db, f"shallow-{i}", 1)
    db.execute("UPDATE fairlane.environments SET concurrency_limit = NULL")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert len(await store.claim(conn, 10, full_scan=True)) == 10
        for name in ("deep-a", "deep-b", "deep-c"):
            queue_runs(db, name, 30)
        db.execute("UPDATE fairlane.environments SET concurrency_limit = NULL")
        plans = await log_nested_plans(conn)
        await conn.execute("SET auto_explain.log_analyze = on")
        got = await store.claim(conn, 10, full_scan=True)
        plans.clear()
        again = await store.claim(conn, 10, full_scan=False)
    assert len({run.environment for run in got}) == 1, "one turn's share, from one environment"
    assert len({run.environment for run in again}) == 1
    locked = [plan for plan in plans if "Query Text: WITH kept AS MATERIALIZED" in plan]
    assert len(locked) == 1
    # The page of the second claim held one environment: it locked no runs it did not keep.
    # PostgreSQL 18 prints the rows with two decimals.
    assert re.search(
        r"Function Scan on pick_runs picks .*actual time=\S+ rows=10(\.00)? ", locked[0]
    )


async def test_an_announced_environment_is_levelled_when_it_is_charged(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """A drained environment a notification named is served in the claim's first round and
    charged once: its service is levelled with the least-served active environment, then
    counts what it took, as mark_environments_active and the charge made it in two writes."""
    queue_runs(db, "busy", 50)
    queue_runs(db, "late", 3)
    queue_runs(db, "held", 3)
    db.execute(
        "UPDATE fairlane.environments SET concurrency_limit = NULL, drained = name <> 'busy',"
        " served = CASE name WHEN 'busy' THEN 500 ELSE 7 END"
    )
    # A cap of 0 keeps held's runs from starting: it joins without being served.
    db.execute("UPDATE fairlane.environments SET concurrency_limit = 0 WHERE name = 'held'")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await store.claim(conn, 5, full_scan=False, announced=["late"])
        # busy gave the other two: charged 502 (from 500, its credit within max_deficit).
        assert [run.environment for run in got].count("late") == 3
        got = await store.claim(conn, 5, full_scan=False, announced=["held"])
        assert {run.environment for run in got} == {"busy"}
    rows = {
        name: (served, is_drained)
        for name, served, is_drained in db.execute(
            "SELECT name, served, drained FROM fairlane.environments WHERE name IN ('late', 'held')"
        ).fetchall()
    }
    assert rows["late"] == (503, True), "levelled with busy (500), then its 3 runs; now empty"
    assert rows["held"] == (502, False), "levelled with busy, and active: its runs wait for room"
