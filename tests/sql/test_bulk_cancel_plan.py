"""A bulk cancel does not depend on fresh statistics: on a runs table autovacuum has not analysed
yet (the test server runs with autovacuum off, so a freshly loaded table has none), cancelling
thousands of runs by tag walks each run's descendants through runs_parent_idx and finishes
well within a statement timeout.

The walk hashed the whole table once per level of each run's tree, and without statistics its
estimate was the table's, so every call also compiled its plan (JIT): tens of milliseconds per
run, and the first page of a bulk cancel ran into the statement timeout, cancelling nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import Client, RunFilter
from fairlane.engine.sqlfiles import query
from tests.helpers import log_nested_plans, statuses

pytestmark = pytest.mark.anyio

# 100,000 finished runs, half of them children; then 2,000 tagged queued runs with a queued
# child each. Nothing is analysed: autovacuum is kept off this table, since on a server where it
# runs (the older and newer servers of CI) it may analyse the table during the test.
FILL = """
ALTER TABLE fairlane.runs SET (autovacuum_enabled = false);
INSERT INTO fairlane.runs (task, payload, status, finished_at, parent_run_id)
SELECT 'old', 'null', 'COMPLETED', now(), CASE WHEN i % 2 = 0 THEN i - 1 END
FROM generate_series(1, 100000) AS i;
INSERT INTO fairlane.runs (task, payload, status, tags)
SELECT 'tagged', 'null', 'QUEUED', ARRAY['X'] FROM generate_series(1, 2000);
INSERT INTO fairlane.runs (task, payload, status, parent_run_id)
SELECT 'child', 'null', 'QUEUED', r.id FROM fairlane.runs r WHERE r.task = 'tagged';
"""


def never_analysed(db: psycopg.Connection[Any]) -> None:
    row = db.execute(
        "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
        " WHERE relid = 'fairlane.runs'::regclass"
    ).fetchone()
    assert row == (None, None)
    stats = db.execute(
        "SELECT count(*) FROM pg_stats WHERE schemaname = 'fairlane' AND tablename = 'runs'"
    ).fetchone()
    assert stats == (0,)


def test_a_bulk_cancel_by_tag_on_a_never_analysed_table_stays_within_its_timeout(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(FILL)
    never_analysed(db)
    # Each page (1,000 runs, one statement) must finish within this; it took 15 s before.
    with Client(dsn, statement_timeout=5) as client:
        result = client.cancel_many(RunFilter(tags=["X"]))
    assert (result.matched, result.changed) == (2000, 2000)
    assert statuses(db) == {"COMPLETED": 100000, "CANCELED": 4000}
    never_analysed(db)


async def test_the_descendants_walk_probes_the_parent_index(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(FILL)
    newest = "SELECT id FROM fairlane.runs WHERE task = 'tagged' ORDER BY id DESC LIMIT 12"
    tagged = [row[0] for row in db.execute(newest)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        # Twelve calls in one session: past the fifth, plpgsql may keep a generic plan.
        cursor = await conn.execute(query("cancel_runs", "fairlane"), {"ids": tagged})
        rows = await cursor.fetchall()
    assert [row[2] for row in rows] == [True] * 12
    walks = [plan for plan in plans if "WITH RECURSIVE walk" in plan]
    assert len(walks) == 12, plans
    for plan in walks:
        assert "Seq Scan on runs" not in plan, plan
        assert "Index Cond: (parent_run_id = walk" in plan, plan
        assert "JIT:" not in plan, plan
    for plan in plans:
        assert "Seq Scan on runs" not in plan, plan
    never_analysed(db)
