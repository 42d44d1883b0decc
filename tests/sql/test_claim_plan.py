"""The claim reads indexes only, even with 100,000 queued runs across 100 environments (some
of them past their TTL, which the claim must skip).

The claim is a plpgsql function, so its statements are planned inside it. auto_explain logs
the plan of every nested statement at NOTICE level, which reaches this client.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from fairlane.worker.lease_store import LeaseStore
from tests.helpers import log_nested_plans

pytestmark = pytest.mark.anyio

FILL = """
INSERT INTO fairlane.environments (name, drained)
SELECT 'env-' || e, false FROM generate_series(1, 100) AS e;
INSERT INTO fairlane.queues (environment, name)
SELECT 'env-' || e, q FROM generate_series(1, 100) AS e, unnest(ARRAY['default', 'bulk']) AS q;
INSERT INTO fairlane.runs (environment, queue, task, payload, status, priority, ttl_s, expires_at)
SELECT 'env-' || (i % 100 + 1), CASE WHEN i % 3 = 0 THEN 'bulk' ELSE 'default' END, 'noop',
       '{}'::jsonb, 'QUEUED', i % 5,
       -- One run in seven outlived its TTL (the expiry job has not run), one has time left.
       CASE i % 7 WHEN 0 THEN 1 WHEN 1 THEN 3600 END,
       CASE i % 7 WHEN 0 THEN now() - interval '1 minute' WHEN 1 THEN now() + interval '1 hour' END
FROM generate_series(1, 100000) AS i;
ANALYZE fairlane.runs;
ANALYZE fairlane.environments;
ANALYZE fairlane.queues;
"""


async def test_claim_never_scans_the_runs_table(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute(FILL)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        store = LeaseStore("fairlane", lease_seconds=30, worker_id="plan")
        claimed = await store.claim(conn, 100)
        # Past the fifth execution psycopg prepares the statement and PostgreSQL may switch to
        # a generic plan: those plans must stay on the indexes too.
        for _ in range(7):
            assert len(await store.claim(conn, 10)) == 10
        # Claims that serve the known environments, and ones those cannot fill (the scan).
        for _ in range(7):
            assert len(await store.claim(conn, 10, full_scan=False)) == 10
        await conn.execute("UPDATE fairlane.environments SET drained = true")
        assert len(await store.claim(conn, 10, full_scan=False)) == 10
        restricted = await store.claim(conn, 50, environments=["env-7"], queues=["bulk"])
    assert len(claimed) == 100
    assert restricted
    assert {run.environment for run in restricted} == {"env-7"}
    runs_plans = [plan for plan in plans if "fairlane.runs" in plan or " runs " in plan]
    assert runs_plans, "auto_explain reported no plan touching the runs table"
    for plan in plans:
        assert "Seq Scan on runs" not in plan, plan
        # Runs come out of the index in claim order: only the few candidates each queue gave
        # are merged (a sort of the subquery's rows), never the queue's runs themselves. (The
        # slot holders of a capped or keyed queue are grouped by key: at most its cap of rows.)
        assert not re.search(r"Sort Key: r(_\d+)?\.(?!concurrency_key\b)", plan), plan
    assert any("runs_queued_keyless_idx" in plan for plan in plans)
    started = "SELECT count(*) FROM fairlane.runs WHERE status <> 'QUEUED' AND ttl_s = %s"
    assert db.execute(started, (1,)).fetchone() == (0,), "a run past its TTL was started"
    assert db.execute(started, (3600,)).fetchone() != (0,)


# A scan of runs_held_idx and its index condition, in an auto_explain plan.
HELD_SCAN = r"Index (?:Only )?Scan using runs_held_idx.*\n\s*Index Cond: (.*)"

# Runs of env-1 that wait (on waitpoints, held by a worker): they hold no slot.
WAITING_IN_ENV_1 = """
INSERT INTO fairlane.runs (environment, task, payload, status, lease_token, lease_until, attempts)
SELECT 'env-1', 'noop', 'null', 'WAITING', gen_random_uuid(), now() + interval '1 hour', 1
FROM generate_series(1, 5000);
"""


async def test_slot_counts_walk_the_held_runs_index_plainly(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A capped environment's slot count reads runs_held_idx in a plain index scan: one that
    marks the entries of runs that ended dead as it passes them, so the counts of a deep drain
    do not fetch every run it ended since the last vacuum again (a bitmap scan marks none);
    and by environment and status, so the environment's waiting runs are not read at all."""
    db.execute(FILL)
    db.execute("UPDATE fairlane.environments SET concurrency_limit = 900 WHERE name = 'env-1'")
    db.execute(WAITING_IN_ENV_1)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        store = LeaseStore("fairlane", lease_seconds=30, worker_id="plan")
        assert len(await store.claim(conn, 800, environments=["env-1"])) == 800
        db.execute("ANALYZE fairlane.runs")
        plans = await log_nested_plans(conn)
        assert await store.claim(conn, 20, environments=["env-1"])
    counts = [plan for plan in plans if "'EXECUTING'" in plan and "env_names" in plan]
    assert counts, plans
    for plan in counts:
        assert "Bitmap" not in plan, plan
        held_scans = re.findall(HELD_SCAN, plan)
        assert held_scans, plan
        for condition in held_scans:
            # The status is a key of the index: the environment's waiting runs are never read.
            assert "(status = 'EXECUTING'::text)" in condition, plan


async def test_a_claim_starts_its_runs_on_a_generic_plan_from_the_first(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The UPDATE that starts the picked runs is not planned anew for each claim: from a
    session's first claim its plan takes the picked ids as a parameter (a custom plan, which
    PostgreSQL kept choosing for it, writes them into the plan)."""
    db.execute(FILL)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        store = LeaseStore("fairlane", lease_seconds=30, worker_id="plan")
        for _ in range(8):
            assert len(await store.claim(conn, 10)) == 10
    started = [plan for plan in plans if "status = 'EXECUTING'," in plan]
    assert len(started) == 8, plans
    for plan in started:
        assert re.search(r"Index Cond: \(id = ANY \(\$\d+\)\)", plan), plan


# A keyed queue whose key at its limit has 50,000 queued runs ahead of 5 keyless ones.
HOT_KEY_AHEAD_OF_KEYLESS = """
INSERT INTO fairlane.environments (name, drained) VALUES ('acme', false);
INSERT INTO fairlane.queues (environment, name, concurrency_limit) VALUES ('acme', 'default', 1);
INSERT INTO fairlane.runs (environment, queue, task, payload, status, concurrency_key)
SELECT 'acme', 'default', 'noop', 'null', 'QUEUED', 'hot' FROM generate_series(1, 50000);
INSERT INTO fairlane.runs (environment, queue, task, payload, status)
SELECT 'acme', 'default', 'noop', 'null', 'QUEUED' FROM generate_series(1, 5);
ANALYZE fairlane.runs;
"""


ENDED_KEYLESS = """
UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now()
WHERE status = 'EXECUTING' AND concurrency_key IS NULL
"""


async def test_the_keyless_turn_walks_the_keyless_index(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Keyless runs queued behind a key's deep backlog are found by the first entry of
    runs_queued_keyless_idx, never by reading the key's runs ahead of them, on the custom plans
    of a session's first calls and on the generic ones after."""
    db.execute(HOT_KEY_AHEAD_OF_KEYLESS)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        plans = await log_nested_plans(conn)
        store = LeaseStore("fairlane", lease_seconds=30, worker_id="plan")
        started = []
        for _ in range(4):
            started.append(await store.claim(conn, 10))
            # The keyless runs' one slot comes free; the hot key's stays taken.
            db.execute(ENDED_KEYLESS)
    # The first claim takes the hot key's run and a keyless one, each after one keyless run.
    assert [len(runs) for runs in started] == [2, 1, 1, 1]
    keyless = [plan for plan in plans if "concurrency_key IS NULL" in plan and "taken" in plan]
    assert len(keyless) >= 4, plans
    for plan in keyless:
        assert "runs_queued_keyless_idx" in plan, plan
        assert "Seq Scan" not in plan, plan
