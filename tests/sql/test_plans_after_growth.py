"""A worker that starts on an empty runs table keeps finding its runs by primary key once the
table has grown.

PostgreSQL keeps a prepared statement's generic plan, and a plpgsql function's, for the rest of
the session, made from the sizes the table had then (until the table is analyzed again; never,
with autovacuum off). Planned while the table held a few runs, the claim's UPDATE hashed the
picked ids and scanned the whole table on every claim, and a completion looped over every
executing run for each lease: a worker started before a burst of 100,000 runs drained it five
times slower than one started after it. The fenced writes are now driven by their leases, and
they and the claim's UPDATE find their runs through an index condition on the primary key.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane.worker.lease_store import Completion, Failure, Lease, LeaseStore
from tests.helpers import log_nested_plans

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
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # Past the fifth execution psycopg prepares a statement, and past the fifth of those
        # PostgreSQL may switch to a generic plan: twelve rounds leave every plan it keeps.
        for _ in range(12):
            db.execute(QUEUE_ONE)
            (run,) = await store.claim(conn, 10)
            lease = Lease(run.id, run.lease_token)
            assert await store.heartbeat(conn, [lease]) == set()  # none lost
            assert await store.set_metadata(conn, [(lease, '{"step": 1}')]) == {run.id}
            assert await store.complete(conn, [Completion(lease, "null")]) == {run.id}
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
