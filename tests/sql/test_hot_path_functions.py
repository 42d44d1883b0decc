"""No hot path calls a function written in SQL that the planner does not inline.

PostgreSQL before 18 plans a SQL function's body anew at every execution of the statement that
calls it (only plpgsql keeps its plans for the session), which cost a one-run trigger about a
tenth of a millisecond for one settings lookup. A SQL function that would be inlined is not
when an argument holds a subquery (`ARRAY(SELECT ...)`): the pickup's charge called
queued_run_of so, and planned it at every pickup. Inlined set-returning SQL functions are part of
the caller's plan and are never called, so they do not show here.

Every call is counted with track_functions = 'all' (pg_stat_xact_user_functions, the current
transaction's calls), over the statements a worker and a producer run all day: triggers plain,
with an idempotency key, debounced, with a concurrency key, into a size-limited queue and
environment (counted, then within the bound kept), the claims (a full scan, the turn order, a
pickup on an idle system that asks for more than it finds, a queue with a rate, the global rate
and concurrency caps), completions, failures with a retry, and heartbeats.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import Debounce, TriggerRequest
from fairlane.limits import set_environment, set_queue
from fairlane.triggering.api import trigger_many_async
from fairlane.worker.lease_store import Completion, Failure, Lease, LeaseStore

pytestmark = pytest.mark.anyio

CALLED = """
SELECT f.funcname, l.lanname, f.calls
FROM pg_stat_xact_user_functions f
JOIN pg_proc p ON p.oid = f.funcid
JOIN pg_language l ON l.oid = p.prolang
WHERE f.schemaname = 'fairlane'
ORDER BY f.funcname
"""


# A run WAITING on a child run's waitpoint, as a handler's trigger-and-wait leaves it, and the
# child, queued; returns the child's id.
PARENT_AND_CHILD = """
WITH parent AS (
    INSERT INTO fairlane.runs (task, payload, status, attempts, wait_attempt)
    VALUES ('parent', 'null', 'WAITING', 1, 1)
    RETURNING id
), child AS (
    INSERT INTO fairlane.runs (task, payload, status, parent_run_id, has_waiters)
    SELECT 't', 'null', 'QUEUED', parent.id, true FROM parent
    RETURNING id
), waitpoint AS (
    INSERT INTO fairlane.waitpoints (kind, run_id, environment)
    SELECT 'RUN', child.id, 'default' FROM child
    RETURNING id
), edge AS (
    INSERT INTO fairlane.run_waitpoints (run_id, attempt, position, item, waitpoint_id)
    SELECT parent.id, 1, 0, 0, waitpoint.id FROM parent, waitpoint
)
SELECT id FROM child
"""


async def hot_paths(conn: psycopg.AsyncConnection[Any]) -> dict[str, tuple[str, int]]:
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="hot")
    await conn.execute("SET LOCAL track_functions = 'all'")
    # The pickup first, while no environment is active: one run, a claim of more, so that its
    # charge looks for another queued run.
    await trigger_many_async(conn, [TriggerRequest("t", environment="idle")])
    claimed = await store.claim(conn, 3, full_scan=False, announced=["idle"])
    assert len(claimed) == 1
    for _ in range(2):
        await trigger_many_async(conn, [TriggerRequest("t", {"n": 1})])
        await trigger_many_async(conn, [TriggerRequest("t", queue="limited") for _ in range(3)])
        await trigger_many_async(conn, [TriggerRequest("t", environment="small")])
        await trigger_many_async(conn, [TriggerRequest("t", idempotency_key="k")])
        await trigger_many_async(conn, [TriggerRequest("t", debounce=Debounce("d", "1m"))])
        await trigger_many_async(conn, [TriggerRequest("t", concurrency_key="c", queue="rated")])
    claimed += await store.claim(conn, 3)
    claimed += await store.claim(conn, 3, full_scan=False)
    claimed += await store.claim(conn, 3, full_scan=False, announced=["default"])
    claimed += await store.claim(conn, 20)
    # The global caps: a rate's tokens taken and the unused ones handed back, the running count.
    await conn.execute(
        "UPDATE fairlane.scheduler SET rate_limit_per_s = 1000, global_concurrency_limit = 1000"
    )
    await trigger_many_async(conn, [TriggerRequest("t")])
    claimed += await store.claim(conn, 5)
    await conn.execute(
        "UPDATE fairlane.scheduler SET rate_limit_per_s = NULL, global_concurrency_limit = NULL"
    )
    # A parent waiting on a child: the child's completion wakes it (durable execution's path).
    cur = await conn.execute(PARENT_AND_CHILD)
    child = await cur.fetchone()
    assert child is not None
    claimed_child = [run for run in await store.claim(conn, 50) if run.id == child[0]]
    assert len(claimed_child) == 1
    claimed += claimed_child
    leases = [Lease(run.id, run.lease_token) for run in claimed]
    await store.heartbeat(conn, leases)
    await store.complete(conn, [Completion(lease, "null") for lease in leases[:3]])
    await store.complete(conn, [Completion(leases[-1], "null")])
    cur = await conn.execute("SELECT resume_ready FROM fairlane.runs WHERE task = 'parent'")
    assert await cur.fetchone() == (True,)
    await store.fail(
        conn, [Failure(lease, '{"message": "no"}', "QUEUED", None) for lease in leases[3:-1]]
    )
    cur = await conn.execute(CALLED)
    return {name: (language, calls) for name, language, calls in await cur.fetchall()}


async def test_the_hot_paths_call_no_sql_function(dsn: str, db: psycopg.Connection[Any]) -> None:
    set_queue(db, "default", "limited", size_limit=1000)
    set_queue(db, "default", "rated", rate_limit=100)
    set_environment(db, "small", size_limit=1000)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        called = await hot_paths(conn)
        await conn.rollback()
    # Every path above ran: the plain and keyed triggers, the size checks counting and keeping
    # bounds, the debounce, the pickup and the general claim, a rated queue's tokens.
    exercised = {
        "insert_runs",
        "trigger_keyed_runs",
        "join_debounced_run",
        "waiting_runs",
        "record_size_bounds",
        "claim_announced",
        "claim_round",
        "key_rate_tokens",
        "take_rate_tokens",
        "return_rate_tokens",
        "wake_waiting_runs",
        "start_picked_runs",
    }
    assert exercised <= called.keys()
    assert {name for name, (language, _calls) in called.items() if language == "sql"} == set()
