"""A worker that starts on an empty runs table keeps finding its runs by primary key once the
table has grown.

PostgreSQL keeps a prepared statement's generic plan, and a plpgsql function's, for the rest of
the session, made from the sizes the table had then (until the table is analyzed again; never,
with autovacuum off). Planned while the table held a few runs, the claim's UPDATE hashed the
picked ids and scanned the whole table on every claim, and a completion looped over every
executing run for each lease: a worker started before a burst of 100,000 runs drained it five
times slower than one started after it. The fenced writes are now driven by their leases, and
they and the claim's UPDATE find their runs through an index condition on the primary key, on
connections (and in the functions: the claim, the pruning and batch jobs) that plan no
sequential scan.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry, TriggerRequest, Worker
from fairlane.connection.options import ConnectionOptions
from fairlane.worker.lease_store import Completion, Failure, Lease, LeaseStore
from fairlane.worker.worker import FENCED_WRITE_SETTINGS
from tests.helpers import log_nested_plans, wait_until

pytestmark = pytest.mark.anyio

QUEUE_ONE = "INSERT INTO fairlane.runs (task, payload, status) VALUES ('early', 'null', 'QUEUED')"

# Another worker's backlog arrives: 200,000 finished runs, 3,000 executing, 2,000 queued.
GROW = """
INSERT INTO fairlane.runs (task, payload, status, finished_at)
SELECT 'old', 'null', 'COMPLETED', now() FROM generate_series(1, 200000);
INSERT INTO fairlane.runs (task, payload, status, lease_token, lease_until, attempts)
SELECT 'busy', 'null', 'EXECUTING', gen_random_uuid(), now() + interval '1 hour', 1
FROM generate_series(1, 3000);
INSERT INTO fairlane.runs (task, payload, status)
SELECT 'late', 'null', 'QUEUED' FROM generate_series(1, 2000);
"""


async def test_plans_made_on_an_empty_table_still_use_the_primary_key(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="early")
    db.execute("INSERT INTO fairlane.environments (name) VALUES ('default')")
    db.execute("INSERT INTO fairlane.queues (environment, name) VALUES ('default', 'default')")
    # The settings of the worker's writer and heartbeat connections (its claims run in
    # claim_runs, which sets its own).
    options = ConnectionOptions(settings=FENCED_WRITE_SETTINGS).kwargs(dsn)
    async with await psycopg.AsyncConnection.connect(dsn, **options) as conn:
        # Past the fifth execution psycopg prepares a statement, and past the fifth of those
        # PostgreSQL may switch to a generic plan: twelve rounds leave every plan it keeps.
        for _ in range(12):
            db.execute(QUEUE_ONE)
            (run,) = await store.claim(conn, 10)
            lease = Lease(run.id, run.lease_token)
            assert await store.heartbeat(conn, [lease]) == set()  # none lost
            assert await store.set_metadata(conn, [(lease, '{"step": 1}')]) == {run.id}
            assert await store.complete(conn, [Completion(lease, "null")]) == {run.id}
        kept = await kept_plans(conn)
        db.execute(GROW)
        plans = await log_nested_plans(conn)
        claimed = await store.claim(conn, 600)
        leases = [Lease(run.id, run.lease_token) for run in claimed]
        done, failed, released = leases[:200], leases[200:400], leases[400:]
        ids = {lease.run_id for lease in leases}
        assert await store.heartbeat(conn, leases) == set()
        assert await store.set_metadata(conn, [(lease, '{"step": 2}') for lease in leases]) == ids
        assert await store.complete(conn, [Completion(lease, "null") for lease in done]) == {
            lease.run_id for lease in done
        }
        failures = [Failure(lease, '{"message": "no"}', "FAILED", None) for lease in failed]
        assert await store.fail(conn, failures) == {lease.run_id for lease in failed}
        assert await store.release(conn, released) == {lease.run_id for lease in released}
    assert len(claimed) == 600
    # The heartbeat, metadata and completion statements were planned once each, not on every
    # call: the plans checked below are the ones made while the table held a few runs.
    if kept is not None:
        fenced_counts = [counts for statement, counts in kept.items() if "lease.token" in statement]
        assert fenced_counts == [(7, 0)] * 3, kept
    for plan in plans:
        assert "Seq Scan on runs" not in plan, plan
    fenced = [plan for plan in plans if "lease.token" in plan]
    assert len(fenced) == 5, plans
    for plan in fenced:
        # A fenced write reads the runs of its leases by primary key, never every executing run.
        assert "runs_executing_idx" not in plan, plan
        assert "Index Cond: (id = lease.id)" in plan, plan
    started = [plan for plan in plans if "status = 'EXECUTING'," in plan]
    assert started
    for plan in started:
        assert "Index Cond: (id = ANY" in plan, plan
        # Joined with the picked ids by hash, or probed by them: never every run the index
        # condition found against every picked id.
        assert "Hash Join" in plan or "Index Cond: (id = p.id)" in plan, plan


async def kept_plans(conn: psycopg.AsyncConnection[Any]) -> dict[str, tuple[int, int]] | None:
    """The session's prepared statements: how many times each ran on its generic plan and on
    a custom one (a plan made for that call's parameters). None before PostgreSQL 14, which
    does not count them; the plans logged below are checked on every version."""
    if conn.info.server_version < 140000:
        return None
    cursor = await conn.execute(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    )
    return {statement: (generic, custom) for statement, generic, custom in await cursor.fetchall()}


def runs_table_scans(db: psycopg.Connection[Any]) -> int:
    """Sequential scans of the runs table so far, as the statistics of ended sessions show."""
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute(
        "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'fairlane.runs'::regclass"
    ).fetchone()
    assert row is not None
    return int(row[0])


def worker_sessions(db: psycopg.Connection[Any]) -> int:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE 'fairlane %%'"
    ).fetchone()
    return int(row[0]) if row else 0


async def test_a_worker_started_on_an_empty_table_never_scans_it(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    handled: list[int] = []
    tasks = TaskRegistry()

    @tasks.task("burst")
    async def record(ctx: RunContext, payload: int) -> None:
        handled.append(payload)

    worker = Worker(tasks, dsn, concurrency=400, claim_batch=200)
    async with AsyncClient(dsn) as client, anyio.create_task_group() as group:
        await group.start(worker.run)
        # Its first claims and outcomes, one run at a time, on a table of a few runs.
        for i in range(20):
            await client.trigger("burst", i)
            await wait_until(lambda n=i + 1: len(handled) == n, what=f"run {i} handled")
        # Then a burst (the table never analyzed: autovacuum may be off, or not there yet).
        for start in range(20, 20_020, 1000):
            await client.trigger_many(
                [TriggerRequest("burst", n) for n in range(start, start + 1000)]
            )
        await wait_until(lambda: len(handled) == 20_020, within=60, what="the burst handled")
        worker.stop()
    # A session's statistics reach the views when it ends.
    await wait_until(lambda: worker_sessions(db) == 0, what="the worker's sessions ended")
    assert runs_table_scans(db) == 0


async def test_the_lease_reclaim_walks_the_held_runs_index_and_marks_ended_runs(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The reclaim finds lapsed leases through runs_held_idx in a plain index scan (which
    marks the entries of runs that ended dead as it passes; a bitmap scan marks none), also in
    a session that planned it on an empty table, and reclaims exactly the lapsed runs."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(12):
            await conn.execute("SELECT fairlane.reclaim_expired_leases()")
        db.execute(GROW)
        db.execute(
            "UPDATE fairlane.runs SET lease_until = now() - interval '1 second'"
            " WHERE id IN (SELECT id FROM fairlane.runs WHERE task = 'busy' ORDER BY id LIMIT 7)"
        )
        plans = await log_nested_plans(conn)
        cursor = await conn.execute("SELECT fairlane.reclaim_expired_leases()")
        outcome = await cursor.fetchone()
    assert outcome is not None
    assert outcome[0]["requeued"] == 7, outcome
    reclaims = [plan for plan in plans if "lease_until < now()" in plan]
    assert reclaims, plans
    for plan in reclaims:
        assert "Index Scan using runs_held_idx" in plan, plan
        assert "Bitmap" not in plan, plan
        assert "Seq Scan" not in plan, plan
