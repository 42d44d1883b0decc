"""Task-aware claims: a claimer takes only runs of the tasks it has handlers for, and an
environment whose runs it does not serve stays active, uncharged, for the claimers that do."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.batches import AsyncBatchClient
from fairlane.triggering.boundary import BATCH_ITEM_TASK, BATCH_QUEUE
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import claim_and_complete
from tests.helpers.batches import chunked, ndjson

pytestmark = pytest.mark.anyio


def bulk(db: psycopg.Connection[Any], task: str, count: int, **options: Any) -> list[int]:
    return trigger_many(db, [TriggerRequest(task, i, **options) for i in range(count)])


def environment_row(db: psycopg.Connection[Any], name: str) -> tuple[bool, int, Any]:
    row = db.execute(
        "SELECT drained, served, last_served_at FROM fairlane.environments WHERE name = %s",
        (name,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def test_two_claimers_with_disjoint_tasks_each_get_only_their_own(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    # Interleaved in one queue: each claimer walks past the other's runs.
    a_runs, b_runs = [], []
    for _ in range(5):
        a_runs += bulk(db, "a", 3, environment="shared")
        b_runs += bulk(db, "b", 2, environment="shared")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got_b = await claim_and_complete(conn, store, 100, tasks=["b"])
        got_a = await claim_and_complete(conn, store, 100, tasks=["a", "c"])
        assert await store.claim(conn, 100, tasks=["a", "b"]) == []
    assert [run.id for run in got_a] == a_runs
    assert [run.id for run in got_b] == b_runs
    assert {run.task for run in got_a} == {"a"}


async def test_a_claimer_that_finds_none_of_its_tasks_leaves_the_environment_to_others(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    b_runs = bulk(db, "b", 4, environment="shared")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # The first visit finds the environment through a scan: it joins the active ones.
        assert await store.claim(conn, 10, tasks=["a"]) == []
        drained, served, served_at = environment_row(db, "shared")
        assert not drained, "the runs of b are still there for a claimer of b"
        assert served_at is None, "a visit that took nothing is no service"
        # Visits of the known environment, without a scan, charge nothing either.
        for _ in range(3):
            assert await store.claim(conn, 10, tasks=["a"], full_scan=False) == []
        assert environment_row(db, "shared") == (False, served, None)
        # The claimer of b finds it among the known ones (no scan) and empties it.
        got = await claim_and_complete(conn, store, 10, tasks=["b"], full_scan=False)
        assert [run.id for run in got] == b_runs
        assert await store.claim(conn, 10, tasks=["b"], full_scan=False) == []
    drained, served_after, _ = environment_row(db, "shared")
    assert drained
    assert served_after == served + len(b_runs)


async def test_an_idle_environment_found_by_the_wrong_claimer_rejoins_level(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_scheduler(db, quantum=2, max_deficit=1000)
    bulk(db, "a", 300, environment="busy")
    bulk(db, "b", 1, environment="idle")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim_and_complete(conn, store, 10, tasks=["a", "b"])
        assert environment_row(db, "idle")[0], "emptied: drained"
        while environment_row(db, "busy")[1] < 200:
            await claim_and_complete(conn, store, 10, tasks=["a"], full_scan=False)
        bulk(db, "b", 20, environment="idle")
        # Found by a scan of a claimer of a alone: active again, level with the busy one.
        await claim_and_complete(conn, store, 10, tasks=["a"])
        drained, idle_served, _ = environment_row(db, "idle")
        assert not drained
        assert idle_served >= environment_row(db, "busy")[1] - 10
        # So the claimer of both alternates instead of handing the idle one its idle time.
        order = [
            run.environment
            for _ in range(4)
            for run in await claim_and_complete(conn, store, 4, tasks=["a", "b"], full_scan=False)
        ]
    assert order.count("idle") <= len(order) // 2 + 2, order


async def test_batch_carriers_are_claimed_only_by_a_claimer_that_names_their_task(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("shared", 1)
        await batches.ingest(batch.id, chunked(ndjson([{"task": "a", "payload": 1}]), 64))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await store.claim(conn, 10, tasks=["a"]) == []
        got = await store.claim(conn, 10, tasks=["a", BATCH_ITEM_TASK])
    assert [(run.task, run.queue) for run in got] == [(BATCH_ITEM_TASK, BATCH_QUEUE)]


async def test_a_cap_holds_no_slot_for_a_run_not_taken(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_environment(db, "capped", concurrency_limit=2)
    bulk(db, "b", 5, environment="capped")
    a_runs = bulk(db, "a", 5, environment="capped")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        got = await store.claim(conn, 10, tasks=["a"])
        assert [run.id for run in got] == a_runs[:2], "the cap counts only runs started"
        assert await store.claim(conn, 10, tasks=["b"]) == [], "and those fill it"
