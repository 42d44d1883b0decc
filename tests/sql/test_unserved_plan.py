"""The unserved-tasks view reads the head of each queue through the queued indexes, never the
runs table or a whole backlog, so it costs the same with a deep backlog as with none.

The fill is tests/sql/test_metrics_plan.py's: mostly finished history, a deep backlog in
acme's default queue, work spread over a hundred environments of two queues each, seven
tasks. One worker is registered that serves t0 everywhere and every task in env-0.
"""

from __future__ import annotations

import re
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from fairlane.engine import engine
from fairlane.engine.statement import rows
from fairlane.engine.workers import UNSERVED_HEAD
from tests.sql.test_metrics_plan import ANALYZE, PLACES, RUNS

WORKERS = """
INSERT INTO fairlane.workers (id, host, pid, version, tasks, concurrency, stale_after_s)
VALUES ('all-t0', 'h', 1, 'v', '{t0}', 1, 30);
INSERT INTO fairlane.workers (id, host, pid, version, tasks, environments, concurrency,
                              stale_after_s)
VALUES ('env-0', 'h', 2, 'v', '{t0,t1,t2,t3,t4,t5,t6}', '{env-0}', 1, 30);
ANALYZE fairlane.workers;
"""
HEAD = 20


def plan_of(db: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> str:
    with psycopg.ClientCursor(db) as cursor:
        explained = cursor.mogrify(f"EXPLAIN {sql}", params)
    return "\n".join(row[0] for row in db.execute(explained).fetchall())


@pytest.mark.timeout(300)
def test_the_unserved_view_reads_queue_heads_only(db: psycopg.Connection[Any]) -> None:
    runs = 200_000
    db.execute(PLACES)
    db.execute(RUNS, {"runs": runs})
    db.execute(WORKERS)
    db.execute(ANALYZE)
    statement = engine("fairlane").workers.unserved(100, head=HEAD)
    plan = plan_of(db, statement.sql, dict(statement.params or {}))
    scanned = set(re.findall(r"Seq Scan on (\w+)", plan))
    assert scanned <= {"queues", "workers"}, plan
    assert "Index Scan using runs_queued_keyless_idx on runs" in plan, plan
    took = []
    for _ in range(2):
        started = time.perf_counter()
        found = rows(db, statement)
        took.append(time.perf_counter() - started)
    started = time.perf_counter()
    rows(db, engine("fairlane").workers.unserved(100))
    took.append(time.perf_counter() - started)
    # Figures to read (-s prints them), never a bound: this machine is shared.
    print(
        f"\nunserved tasks at {runs:,} runs ({runs // 4:,} queued): head {HEAD} "
        + ", ".join(f"{seconds * 1000:.1f} ms" for seconds in took[:2])
        + f"; head {UNSERVED_HEAD} {took[2] * 1000:.1f} ms"
    )
    unserved = {(task.environment, task.task) for task in found}
    assert ("acme", "t0") not in unserved
    assert not any(env == "env-0" for env, _ in unserved)
    assert {task for env, task in unserved if env == "acme"} == {f"t{i}" for i in range(1, 7)}
    acme = [task for task in found if task.environment == "acme"]
    assert sum(task.runs for task in acme) <= HEAD
    with db.cursor(row_factory=dict_row) as cursor:
        deep = cursor.execute(
            "SELECT count(*) AS n FROM fairlane.runs WHERE environment = 'acme'"
            " AND status = 'QUEUED'"
        ).fetchone()
    assert deep is not None
    assert deep["n"] > HEAD
