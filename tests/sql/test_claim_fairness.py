"""Fair scheduling in the claim: DRR across environments, priority within, pause, restriction."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import claim_and_complete

pytestmark = pytest.mark.anyio


def bulk(db: psycopg.Connection[Any], environment: str, count: int, **options: Any) -> list[int]:
    requests = [TriggerRequest("noop", i, environment=environment, **options) for i in range(count)]
    return trigger_many(db, requests)


async def test_small_environments_are_not_held_back_by_a_huge_one(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    bulk(db, "A", 20_000)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(30):  # A has been running alone for a while
            assert {run.environment for run in await claim_and_complete(conn, store, 10)} == {"A"}
        for environment in ("B", "C", "D"):
            bulk(db, environment, 200)
        order: list[str] = []
        while len(order) < 800:
            order += [run.environment for run in await claim_and_complete(conn, store, 10)]
    one_round = limits.scheduler_settings(db).quantum * 4
    first = {env: order.index(env) for env in "BCD"}
    assert max(first.values()) < one_round, first
    shares = Counter(order[:800])
    assert all(180 <= shares[env] <= 220 for env in "ABCD"), shares


async def test_a_held_back_environment_gets_bounded_credit(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_scheduler(db, quantum=5, max_deficit=20)
    bulk(db, "X", 500)
    bulk(db, "Y", 500)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await claim_and_complete(conn, store, 10)
        limits.set_environment(db, "X", paused=True)
        for _ in range(20):
            claimed = await claim_and_complete(conn, store, 10)
            assert {run.environment for run in claimed} == {"Y"}
        limits.set_environment(db, "X", paused=False)
        order: list[str] = []
        for _ in range(10):
            order += [run.environment for run in await claim_and_complete(conn, store, 5)]
    # X catches up first, by at most max_deficit plus one quantum, then they alternate.
    first_y = order.index("Y")
    assert 20 <= first_y <= 25, order
    assert "X" in order[first_y:], order


async def test_priority_then_age_within_an_environment(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    older = bulk(db, "E", 5)
    urgent = bulk(db, "E", 1, priority=10)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        first = await store.claim(conn, 1)
        rest = await store.claim(conn, 10)
    assert [run.id for run in first] == urgent
    assert [run.id for run in rest] == older


async def test_paused_queue_and_environment_hand_out_nothing(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    bulk(db, "P", 3, queue="slow")
    bulk(db, "P", 3, queue="fast")
    limits.set_queue(db, "P", "slow", paused=True)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed = await store.claim(conn, 10)
        assert {run.queue for run in claimed} == {"fast"}
        limits.set_queue(db, "P", "slow", paused=False)
        limits.set_environment(db, "P", paused=True)
        assert await store.claim(conn, 10) == []
        limits.set_environment(db, "P", paused=False)
        assert {run.queue for run in await store.claim(conn, 10)} == {"slow"}


async def test_claims_stay_inside_the_worker_set(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    for environment in ("in", "out"):
        for queue in ("mine", "theirs"):
            bulk(db, environment, 5, queue=queue)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed = await store.claim(conn, 100, environments=["in"], queues=["mine"])
        assert len(claimed) == 5
        assert {(run.environment, run.queue) for run in claimed} == {("in", "mine")}
        assert await store.claim(conn, 100, environments=["in"], queues=["mine"]) == []
        others = await store.claim(conn, 100, environments=["out"])
    assert {run.environment for run in others} == {"out"}
    assert len(others) == 10
