"""The pickup's claim (sql/claim/announced.sql): one environment a notification named, on an
otherwise idle system, claimed in one statement; it ends where the general claim ends, and
leaves every other case to it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger_many
from fairlane.models import ClaimedRun
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio

# Calls made by the current transaction, by function (track_functions on for the session).
CALLS = """
SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE schemaname = 'fairlane'
"""


def queue_runs(db: psycopg.Connection[Any], environment: str, count: int, **options: Any) -> None:
    trigger_many(
        db, [TriggerRequest("t", i, environment=environment, **options) for i in range(count)]
    )


def environment(db: psycopg.Connection[Any], name: str) -> tuple[int, bool]:
    row = db.execute(
        "SELECT served, drained FROM fairlane.environments WHERE name = %s", (name,)
    ).fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


async def claim_counting_calls(
    conn: psycopg.AsyncConnection[Any], store: LeaseStore, limit: int, announced: list[str]
) -> tuple[list[ClaimedRun], dict[str, int]]:
    """Claim in a transaction of its own; return the runs and the functions' calls in it."""
    await conn.execute("SET track_functions = 'all'")
    async with conn.transaction():
        got = await store.claim(conn, limit, full_scan=False, announced=announced)
        calls = dict(await (await conn.execute(CALLS)).fetchall())
    return got, calls


async def test_a_pickup_is_one_statement_and_charges_like_the_general_claim(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "tenant", 2)
    queue_runs(db, "tenant", 1, queue="urgent", priority=60)
    db.execute("UPDATE fairlane.environments SET drained = true, served = 40")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 10, ["tenant"])
    assert calls.get("claim_announced") == 1
    assert "claim_round" not in calls
    assert "claim_turns" not in calls
    # Queue order across the environment's queues: the urgent run (a minute's priority) first.
    assert [run.queue for run in got] == ["urgent", "default", "default"]
    assert [run.attempt for run in got] == [1, 1, 1]
    assert len({run.lease_token for run in got}) == 3
    # Charged what it got, and drained: nothing of it is left queued.
    assert environment(db, "tenant") == (43, True)


async def test_a_pickup_that_leaves_runs_keeps_the_environment_active(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "tenant", 5)
    db.execute("UPDATE fairlane.environments SET drained = true, served = 0")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 2, ["tenant"])
    assert calls.get("claim_announced") == 1
    assert len(got) == 2
    assert environment(db, "tenant") == (2, False)


async def test_a_pickup_keeps_the_environment_cap_and_leaves_the_rest_for_later(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "tenant", 4)
    db.execute("UPDATE fairlane.environments SET drained = true, concurrency_limit = 1")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 10, ["tenant"])
        assert calls.get("claim_announced") == 1
        assert len(got) == 1
        # The environment is active (its runs wait for room): the next claim is the general
        # one, and the cap still holds.
        again, calls = await claim_counting_calls(conn, store, 10, ["tenant"])
    assert again == []
    assert "claim_round" in calls
    assert environment(db, "tenant") == (1, False)


async def test_other_active_environments_take_the_general_claim(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "busy", 5)
    queue_runs(db, "late", 2)
    db.execute("UPDATE fairlane.environments SET drained = name <> 'busy'")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 4, ["late"])
    # The statement found busy active and took nothing; the general claim served both.
    assert calls.get("claim_announced") == 1
    assert calls.get("claim_round", 0) >= 1
    assert sorted(run.environment for run in got) == ["busy", "busy", "late", "late"]


async def test_runs_the_claimer_cannot_run_are_left_as_the_general_claim_leaves_them(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "tenant", 2)
    db.execute("UPDATE fairlane.environments SET drained = true")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SET track_functions = 'all'")
        async with conn.transaction():
            got = await store.claim(
                conn, 10, full_scan=False, announced=["tenant"], tasks=["another"]
            )
            calls: dict[str, int] = dict(await (await conn.execute(CALLS)).fetchall())
    assert got == []
    assert calls.get("claim_announced") == 1
    assert calls.get("claim_round") == 1
    # Active and uncharged: its runs wait for a worker that has their task.
    assert environment(db, "tenant") == (0, False)


async def test_a_paused_environment_gives_nothing(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    queue_runs(db, "tenant", 2)
    db.execute("UPDATE fairlane.environments SET drained = true, paused = true")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await store.claim(conn, 10, full_scan=False, announced=["tenant"])
    assert got == []
    queued = db.execute("SELECT count(*) FROM fairlane.runs WHERE status = 'QUEUED'").fetchone()
    assert queued == (2,)


async def test_two_pickups_at_once_start_each_run_once_and_never_wait(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """The first holds the environment's row until it commits; the second, made meanwhile,
    passes over it (SKIP LOCKED, in this statement and in the general claim after it) and
    returns empty instead of waiting. After the commit, the cap counts the first's run."""
    queue_runs(db, "tenant", 3)
    db.execute("UPDATE fairlane.environments SET drained = true, concurrency_limit = 1")
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as first,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as second,
    ):
        await second.execute("SET lock_timeout = '5s'")
        async with first.transaction():
            got_first = await store.claim(first, 10, full_scan=False, announced=["tenant"])
            got_second = await store.claim(second, 10, full_scan=False, announced=["tenant"])
        got_after = await store.claim(second, 10, full_scan=False, announced=["tenant"])
    assert len(got_first) == 1
    assert got_second == []
    assert got_after == [], "the cap of 1 is held by the first claim's run"
    executing = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE status = 'EXECUTING'"
    ).fetchone()
    assert executing == (1,)


async def test_a_pickup_reads_indexes_only_among_many_environments(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Among 2,000 drained environments with 20 runs each, past the fifth call (psycopg
    prepares the statement; generic plans from there)."""
    db.execute(
        "INSERT INTO fairlane.environments (name, drained)"
        " SELECT 'env-' || e, true FROM generate_series(1, 2000) AS e"
    )
    db.execute(
        "INSERT INTO fairlane.queues (environment, name)"
        " SELECT 'env-' || e, 'default' FROM generate_series(1, 2000) AS e"
    )
    db.execute(
        "INSERT INTO fairlane.runs (environment, task, payload, status)"
        " SELECT 'env-' || (i % 2000 + 1), 't', 'null', 'QUEUED'"
        " FROM generate_series(1, 40000) AS i"
    )
    db.execute("ANALYZE fairlane.runs")
    db.execute("ANALYZE fairlane.environments")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        for n in range(1, 9):
            got = await store.claim(conn, 30, full_scan=False, announced=[f"env-{n}"])
            assert len(got) == 20
            # Emptied: drained again, so the next environment's pickup is one statement too.
            assert environment(db, f"env-{n}") == (20, True)
    assert any("claim_announced" in plan or "pick_runs" in plan for plan in plans)
    for plan in plans:
        assert "Seq Scan" not in plan, plan


# A started run as both claims leave it, without what differs by nature (ids, tokens, times).
STARTED_ROWS = """
SELECT task, payload, status, attempts, resume_ready, worker_id, queue, expires_at IS NULL,
       started_at IS NOT NULL, lease_token IS NOT NULL, lease_until - started_at
FROM fairlane.runs WHERE environment = %s ORDER BY queue_order, id
"""


async def test_both_claims_leave_the_same_rows(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    for name in ("announced", "scanned"):
        queue_runs(db, name, 2, ttl=3600)
        queue_runs(db, name, 1, queue="urgent", priority=30)
        queue_runs(db, name, 1, concurrency_key=None, queue="later", delay=None)
    # One run of each was tried before (a retry queued it again).
    db.execute(
        "UPDATE fairlane.runs SET attempts = 1 WHERE id IN"
        " (SELECT max(id) FROM fairlane.runs GROUP BY environment)"
    )
    db.execute("UPDATE fairlane.environments SET drained = true, served = 10")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 10, ["announced"])
        assert calls.get("claim_announced") == 1
        assert "claim_round" not in calls
        general = await store.claim(conn, 10, environments=["scanned"])
    assert len(got) == len(general) == 4
    assert [(r.task, r.payload, r.attempt, r.queue) for r in got] == [
        (r.task, r.payload, r.attempt, r.queue) for r in general
    ]
    assert db.execute(STARTED_ROWS, ("announced",)).fetchall() == (
        db.execute(STARTED_ROWS, ("scanned",)).fetchall()
    )
    assert environment(db, "announced") == environment(db, "scanned") == (14, True)


@pytest.mark.parametrize(
    ("setup", "taken"),
    [
        ("UPDATE fairlane.queues SET concurrency_limit = 2", 2),
        ("UPDATE fairlane.queues SET total_limit = 2", 2),
        ("UPDATE fairlane.queues SET rate_limit = 100, rate_burst = 2", 2),
        (
            "UPDATE fairlane.queues SET concurrency_limit = 1;"
            " UPDATE fairlane.runs SET concurrency_key = 'k'",
            1,
        ),
        ("UPDATE fairlane.runs SET queue = '__batches__'", 3),
    ],
    ids=["queue cap", "total limit", "rate", "concurrency key", "batch carriers"],
)
async def test_a_pickup_keeps_every_limit_of_the_queues_it_takes_from(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore, setup: str, taken: int
) -> None:
    """The pick is pick_runs': queue caps, total limits, rates and keys hold in one statement."""
    queue_runs(db, "tenant", 3)
    db.execute("INSERT INTO fairlane.queues (environment, name) VALUES ('tenant', '__batches__')")
    db.execute(setup)
    db.execute("UPDATE fairlane.environments SET drained = true")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got, calls = await claim_counting_calls(conn, store, 10, ["tenant"])
    assert calls.get("claim_announced") == 1
    assert "claim_round" not in calls
    assert len(got) == taken
    # Emptied, or its runs left waiting for room: drained only in the first case.
    assert environment(db, "tenant") == (taken, taken == 3)
