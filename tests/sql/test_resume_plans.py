"""Waking and replaying many waiting runs reads them by primary key, whatever the planner
knows of the tables.

With autovacuum off (the benchmarks' condition) or before it has run, the tables have no
statistics. Priced that way, a completion of 5,000 tokens read every edge and sorted every
WAITING run to find the ones to wake, and a claim's replay read of its 1,000 runs' recorded
calls scanned every run and every recorded call in a parallel hash join that JIT compiled
first: at 100,000 waiting runs, 0.17 s of each completion and 0.6 s of each claim
(bench/sittings/35-resuming-waits.md). Both go through their keys now, from a list of ids of
any length.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio

WAITING_RUNS = 3000
WOKEN = 1000

# Runs waiting without a worker, each on its own token, as a detached wait leaves them.
WAITING = f"""
WITH token AS (
    INSERT INTO fairlane.waitpoints (kind, status)
    SELECT 'MANUAL', 'PENDING' FROM generate_series(1, {WAITING_RUNS})
    RETURNING id
), waiting AS (
    INSERT INTO fairlane.runs (task, payload, status, attempts, wait_attempt)
    SELECT 'waits', to_jsonb(token.id), 'WAITING', 1, 1 FROM token
    RETURNING id, (payload #>> '{{}}')::bigint AS token_id
), edge AS (
    INSERT INTO fairlane.run_waitpoints (run_id, attempt, position, item, waitpoint_id)
    SELECT waiting.id, 1, 0, 0, waiting.token_id FROM waiting
    RETURNING run_id, waitpoint_id
)
INSERT INTO fairlane.run_steps (run_id, position, kind, name, attempt, status)
SELECT edge.run_id, 0, 'WAIT', 'wait_for_token', 1, 'WAITING' FROM edge
RETURNING run_id
"""
COMPLETE = """
UPDATE fairlane.waitpoints SET status = 'COMPLETED', completed_at = now(), output = 'true'
WHERE id = ANY(%s::bigint[])
"""


async def test_waking_and_replaying_many_runs_reads_them_by_key(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO fairlane.environments (name) VALUES ('default')")
    db.execute("INSERT INTO fairlane.queues (environment, name) VALUES ('default', 'default')")
    run_ids = sorted(row[0] for row in db.execute(WAITING).fetchall())[:WOKEN]
    tokens = [
        row[0]
        for row in db.execute(
            "SELECT waitpoint_id FROM fairlane.run_waitpoints WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchall()
    ]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        async with conn.transaction():
            await conn.execute(COMPLETE, (tokens,))
            cursor = await conn.execute("SELECT fairlane.wake_waiting_runs(%s)", (tokens,))
            assert await cursor.fetchone() == (WOKEN,)
        woken = [plan for plan in plans if "edge.waitpoint_id = ANY" in plan]
        assert len(woken) == 1, plans
        cursor = await conn.execute(
            "SELECT run_id, complete, results FROM fairlane.recorded_calls(%s)", (run_ids,)
        )
        calls = await cursor.fetchall()
        replayed = [plan for plan in plans if "s.run_id = ANY" in plan]
        assert len(replayed) == 1, plans
    # Every woken run is queued again to be replayed, its wait answered from its record.
    assert [row[0] for row in calls] == run_ids
    assert all(complete and results == [[0, False, True, None]] for _, complete, results in calls)
    queued = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE status = 'QUEUED' AND resume_ready"
    ).fetchone()
    assert queued == (WOKEN,)
    for plan in woken + replayed:
        assert "Seq Scan" not in plan, plan
        assert "JIT" not in plan, plan
    # The runs by the list of their ids, not joined with the edges, which the planner did
    # by sorting every WAITING run.
    assert "Join" not in woken[0], woken[0]
    assert "Filter: ((NOT resume_ready) AND (id = ANY" in woken[0], woken[0]
    assert "Index Scan using run_steps_pkey" in replayed[0], replayed[0]
