"""Where a claim starts reading the turn order (claim_runs' turn_start and first_turn).

Every charge moves an environment forward in environments_turn_idx and leaves a dead entry
where it was, in front of the live ones, until the environments table is vacuumed. A claim
read from the index's start walked every one of them. A worker's claim now starts where its
last claim found the first environment: no active environment sorts before that, except one
that joined in a race with a charge or was unpaused, which the worker's next claim without
it (a full scan, or the claim after a short one) reads.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import claim, claim_and_complete, log_nested_plans

pytestmark = pytest.mark.anyio


def first_in_turn(db: psycopg.Connection[Any]) -> str:
    row = db.execute(
        "SELECT name FROM fairlane.environments WHERE NOT drained AND NOT paused"
        " ORDER BY served, coalesce(last_served_at, '-infinity'::timestamptz), name LIMIT 1"
    ).fetchone()
    assert row is not None
    return str(row[0])


def turn_index_buffers(plans: list[str]) -> list[int]:
    """The buffers each claim's read of the turn order touched in environments_turn_idx and
    the environments it points to."""
    counts = []
    for plan in plans:
        if "Query Text: SELECT array_agg(t.name" not in plan:
            continue
        scan = re.search(
            r"Index Scan using environments_turn_idx.*?Buffers: shared ([^\n]*)", plan, re.S
        )
        assert scan, plan
        counts.append(sum(int(n) for n in re.findall(r"=(\d+)", scan.group(1))))
    return counts


async def test_a_claim_reads_the_turn_order_from_where_the_last_one_found_its_first(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """2,000 environments with two runs each, served a run per turn: after 3,000 charges the
    index's first pages (some fifteen) hold only dead entries. The worker's claims start past
    them; a claim without the start (a full scan's) walks them."""
    db.execute("ALTER TABLE fairlane.environments SET (autovacuum_enabled = false)")
    limits.set_scheduler(db, quantum=1)
    db.execute(
        """
        INSERT INTO fairlane.environments (name, drained)
        SELECT 'env-' || lpad(e::text, 4, '0'), false FROM generate_series(1, 2000) AS e;
        INSERT INTO fairlane.queues (environment, name)
        SELECT 'env-' || lpad(e::text, 4, '0'), 'default' FROM generate_series(1, 2000) AS e;
        INSERT INTO fairlane.runs (environment, queue, task, payload, status)
        SELECT 'env-' || lpad(e::text, 4, '0'), 'default', 't', 'null', 'QUEUED'
        FROM generate_series(1, 2000) AS e, generate_series(1, 2);
        ANALYZE fairlane.environments;
        """
    )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(300):
            assert len(await claim_and_complete(conn, store, 10, full_scan=False)) == 10
        plans = await log_nested_plans(conn)
        await conn.execute("SET auto_explain.log_analyze = on")
        await conn.execute("SET auto_explain.log_buffers = on")
        assert len(await claim_and_complete(conn, store, 10, full_scan=False)) == 10
        started = turn_index_buffers(plans)
        plans.clear()
        assert len(await claim_and_complete(conn, store, 10, full_scan=True)) == 10
        from_the_index_start = turn_index_buffers(plans)
    # One claim read one page; its start is at most a leaf page before the live entries.
    assert len(started) == 1, started
    assert started[0] <= 12, started
    # The dead entries are leaf pages of their own, about 200 entries to a page.
    assert len(from_the_index_start) == 1, from_the_index_start
    assert from_the_index_start[0] >= started[0] + 10, (from_the_index_start, started)


async def test_an_environment_that_joined_and_took_nothing_is_read_by_the_next_claim(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """An announced environment at its cap joins without being served: level with the least
    served and served longer ago than any, it sorts before the first environment the claim
    read. The claim's first_turn says so, and when its slot frees the next claim takes it.
    So do environments a scan found and a claim's round left unserved."""
    limits.set_environment(db, "J", concurrency_limit=1)
    (held,) = trigger_many(db, [TriggerRequest("t", 0, environment="J")])
    token = claim(db, held)
    for name in ("a", "b", "c"):
        trigger_many(db, [TriggerRequest("t", i, environment=name) for i in range(50)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # The first claim finds a, b and c by a scan and serves them in one round: the two
        # that round leaves unserved sort before the first environment the claim read.
        served = set()
        for _ in range(4):
            got = await claim_and_complete(conn, store, 3, full_scan=False)
            served |= {run.environment for run in got}
        assert served == {"a", "b", "c"}
        trigger_many(db, [TriggerRequest("t", 1, environment="J")])
        got = await claim_and_complete(conn, store, 3, full_scan=False, announced=["J"])
        assert {run.environment for run in got} <= {"a", "b", "c"}, "J is at its cap"
        assert first_in_turn(db) == "J", "J joined in front of the environments read"
        db.execute(
            "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now()"
            " WHERE id = %s AND lease_token = %s",
            (held, token),
        )
        got = await claim_and_complete(conn, store, 3, full_scan=False)
    assert "J" in {run.environment for run in got}


async def test_a_claim_of_some_environments_neither_uses_nor_returns_a_start(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """A start found among some environments says nothing of the others: a claim limited to
    some returns none, and one given anyway reads the turn order from its start."""
    for name in ("a", "b"):
        trigger_many(db, [TriggerRequest("t", i, environment=name) for i in range(5)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT first_turn FROM fairlane.claim_runs(2, 30, 'w', ARRAY['b'], NULL, true)"
            )
        ).fetchall()
        assert [row[0] for row in rows] == [None, None]
        rows = await (
            await conn.execute(
                "SELECT environment, first_turn FROM fairlane.claim_runs(2, 30, 'w',"
                " only_environments => ARRAY['a'], full_scan => false,"
                ' turn_start => \'[0, "infinity", "zz"]\')'
            )
        ).fetchall()
    assert [row[0] for row in rows] == ["a", "a"], "the start past every environment is unused"
    assert rows[-1][1] is None


async def test_a_claim_that_fails_drops_its_start(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """A start the database cannot read (one a worker of another release kept, say) fails
    the claim once; the worker's next claim reads the turn order from its start."""
    for name in ("a", "b"):
        trigger_many(db, [TriggerRequest("t", i, environment=name) for i in range(5)])
    store._turn_start = '["not a position"]'
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.DataError):
            await store.claim(conn, 2, full_scan=False)
        got = await store.claim(conn, 4, full_scan=False)
    assert len(got) == 4


async def test_an_unpaused_environment_is_read_by_the_claim_it_is_announced_to(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    """Paused while the others were served, an environment comes back where it was in the
    turn order, before the worker's start. Unpausing announces it, and the claim it is
    announced to reads the turn order from it: it is the least served, so served first."""
    for name in ("a", "b", "x"):
        trigger_many(db, [TriggerRequest("t", i, environment=name) for i in range(40)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim_and_complete(conn, store, 3)
        limits.set_environment(db, "x", paused=True)
        for _ in range(6):
            got = await claim_and_complete(conn, store, 3, full_scan=False)
            assert {run.environment for run in got} <= {"a", "b"}
        limits.set_environment(db, "x", paused=False)
        assert first_in_turn(db) == "x"
        got = await claim_and_complete(conn, store, 3, full_scan=False, announced=["x"])
    assert "x" in {run.environment for run in got}
