"""The workers registry against its pruning job, two connections stepped against each other.
The lock: the worker's row lock. A heartbeat tick (touch_worker) and the job's DELETE
(prune_dead_workers) both take it; the one that comes second waits, then re-reads the row's
latest version (READ COMMITTED): a tick that committed first keeps a stale row alive, and a
tick after a prune finds no row, so its worker registers again."""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.engine.sqlfiles import query
from tests.helpers.interleave import sessions

STALE = (
    "INSERT INTO fairlane.workers (id, host, pid, version, tasks, environments, queues,"
    " concurrency, stale_after_s, last_seen_at)"
    " VALUES ('w', 'box', 42, '9.9', '{t}', NULL, NULL, 8, 30, now() - interval '1 hour')"
)
PRUNE = "SELECT fairlane.prune_dead_workers()"


def test_a_tick_that_commits_first_keeps_a_stale_worker(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(STALE)
    db.commit()
    with sessions(dsn, 2) as (worker, job):
        worker.begin()
        assert worker.run(query("touch_worker", "fairlane"), {"stopping": False, "id": "w"})
        pending = job.start(PRUNE)
        job.blocked()
        worker.commit()
        assert pending.result(timeout=30)[0][0] == {"pruned": 0}
    assert db.execute("SELECT count(*) FROM fairlane.workers").fetchone() == (1,)


def test_a_tick_after_the_prune_finds_no_row_and_registers_again(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(STALE)
    db.commit()
    with sessions(dsn, 2) as (worker, job):
        job.begin()
        assert job.run(PRUNE)[0][0] == {"pruned": 1}
        pending = worker.start(query("touch_worker", "fairlane"), {"stopping": False, "id": "w"})
        worker.blocked()
        job.commit()
        assert pending.result(timeout=30) == [], "no row: the worker registers again"
    assert db.execute("SELECT count(*) FROM fairlane.workers").fetchone() == (0,)
