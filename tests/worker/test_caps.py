"""Concurrency caps hold under concurrent claimers, and every end of a run frees its slot."""

from __future__ import annotations

import random
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, limits, trigger_many
from fairlane.worker.lease_store import Completion, Failure, Lease, LeaseStore
from tests.helpers import running, statuses

pytestmark = pytest.mark.anyio

QUEUE_CAPS = {"one": 1, "three": 3, "ten": 10}
ENV_CAP = 12


def executing(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute(
        "SELECT queue, count(*) FROM fairlane.runs WHERE status = 'EXECUTING' GROUP BY queue"
    ).fetchall()
    return dict(rows)


async def test_caps_are_never_exceeded_by_four_workers(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "acme", concurrency_limit=ENV_CAP)
    for queue, cap in QUEUE_CAPS.items():
        limits.set_queue(db, "acme", queue, concurrency_limit=cap)
    shares = {"one": 150, "three": 550, "ten": 1300}
    requests = [
        TriggerRequest("work", None, environment="acme", queue=queue)
        for queue, count in shares.items()
        for _ in range(count)
    ]
    trigger_many(db, requests)

    tasks = TaskRegistry()

    @tasks.task("work")
    async def work(ctx: RunContext, payload: Any) -> None:
        await anyio.sleep(random.uniform(0.0005, 0.004))

    # One of the four runs the periodic jobs: 4 x 4 + 1 connections, and the test's two.
    workers = [
        Worker(tasks, dsn, concurrency=20, poll_interval=0.05, run_periodic_jobs=n == 0)
        for n in range(4)
    ]
    samples: list[dict[str, int]] = []
    with psycopg.connect(dsn, autocommit=True) as sampler:
        async with running(*workers):
            while statuses(sampler).get("COMPLETED", 0) < len(requests):
                samples.append(executing(sampler))
                await anyio.sleep(0.001)
    assert len(samples) > 50
    for sample in samples:
        assert sum(sample.values()) <= ENV_CAP, sample
        for queue, cap in QUEUE_CAPS.items():
            assert sample.get(queue, 0) <= cap, sample
    # The caps were reached, so the test did test them.
    assert max(sum(sample.values()) for sample in samples) == ENV_CAP
    assert max(sample.get("one", 0) for sample in samples) == 1


async def test_every_end_of_a_run_frees_its_slot(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_queue(db, "solo", "q", concurrency_limit=1)
    trigger_many(db, [TriggerRequest("t", i, environment="solo", queue="q") for i in range(5)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:

        async def hold_one() -> Lease:
            (run,) = await store.claim(conn, 10)
            assert await store.claim(conn, 10) == [], "the cap of 1 must hold"
            return Lease(run.id, run.lease_token)

        lease = await hold_one()
        await store.complete(conn, [Completion(lease, "1")])
        lease = await hold_one()
        await store.fail(conn, [Failure(lease, "{}", "FAILED", None)])
        lease = await hold_one()
        await store.fail(conn, [Failure(lease, "{}", "DELAYED", 60.0)])  # a retry
        lease = await hold_one()
        await store.release(conn, [lease])  # graceful shutdown
        lease = await hold_one()
        db.execute(
            "UPDATE fairlane.runs SET lease_until = now() - interval '1 second' WHERE id = %s",
            (lease.run_id,),
        )
        db.execute("SELECT fairlane.reclaim_expired_leases()")  # lease lapse
        assert len(await store.claim(conn, 10)) == 1


async def test_global_cap_holds_across_environments(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_scheduler(db, global_concurrency_limit=5)
    for environment in ("a", "b", "c"):
        trigger_many(db, [TriggerRequest("t", i, environment=environment) for i in range(5)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        first = await store.claim(conn, 4)
        second = await store.claim(conn, 4)
        assert len(first) + len(second) == 5
        assert await store.claim(conn, 4) == []
        limits.set_scheduler(db, global_concurrency_limit=None)
        assert len(await store.claim(conn, 100)) == 10


async def test_burst_factor_raises_the_environment_cap_above_its_queues(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_environment(db, "burst", concurrency_limit=4, burst_factor=1.5)
    for queue in ("x", "y"):
        trigger_many(
            db, [TriggerRequest("t", i, environment="burst", queue=queue) for i in range(10)]
        )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        claimed = await store.claim(conn, 100)
    # Environment cap floor(4 x 1.5) = 6; each queue is capped at the environment limit, 4.
    assert len(claimed) == 6
    per_queue = {queue: sum(run.queue == queue for run in claimed) for queue in ("x", "y")}
    assert max(per_queue.values()) <= 4


@pytest.mark.parametrize(
    ("burst", "x_limit", "taken_per_queue"),
    [
        # Without a burst the environment's room (3 - 2 running) is all there is, whatever
        # limit of x's own is no smaller than the environment's.
        (1.0, None, {"x": 1, "y": 0}),
        (1.0, 3, {"x": 1, "y": 0}),
        (1.0, 5, {"x": 1, "y": 0}),
        # A limit of x below the environment's binds first: x is full, y takes the room.
        (1.0, 2, {"x": 0, "y": 1}),
        # With a burst (cap floor(3 x 2) = 6, room 4) a queue is still capped at the
        # environment limit, counting its own running runs: x has room for 1, y takes 3.
        (2.0, None, {"x": 1, "y": 3}),
    ],
)
async def test_an_environment_limit_bounds_each_queue_counting_its_running_runs(
    dsn: str,
    db: psycopg.Connection[Any],
    store: LeaseStore,
    burst: float,
    x_limit: int | None,
    taken_per_queue: dict[str, int],
) -> None:
    # The pick counts a queue's own running runs only where the environment's room may not
    # be the smaller (sql/claim/pick.sql); each case holds either way.
    limits.set_environment(db, "capped", concurrency_limit=3, burst_factor=burst)
    if x_limit is not None:
        limits.set_queue(db, "capped", "x", concurrency_limit=x_limit)
    trigger_many(db, [TriggerRequest("t", i, environment="capped", queue="x") for i in range(10)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert len(await store.claim(conn, 2)) == 2
        trigger_many(
            db, [TriggerRequest("t", i, environment="capped", queue="y") for i in range(10)]
        )
        # x's runs queued first: the claim walks x before y.
        claimed = await store.claim(conn, 100)
    taken = {queue: sum(run.queue == queue for run in claimed) for queue in ("x", "y")}
    assert taken == taken_per_queue
    running_now = {"x": 2 + taken_per_queue["x"], "y": taken_per_queue["y"]}
    assert executing(db) == {queue: n for queue, n in running_now.items() if n}


async def test_an_environment_limit_under_its_keys_limit_bounds_a_keyed_queue(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    # Each key may run 4, the environment 3 in all: the keys' holders go uncounted (the
    # environment's room is the smaller), and the environment's cap holds across the keys.
    limits.set_environment(db, "keyed", concurrency_limit=3)
    limits.set_queue(db, "keyed", "x", concurrency_limit=4)
    trigger_many(
        db,
        [
            TriggerRequest("t", i, environment="keyed", queue="x", concurrency_key=key)
            for key in ("a", "b")
            for i in range(6)
        ],
    )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        first = await store.claim(conn, 2)
        second = await store.claim(conn, 100)
        assert await store.claim(conn, 100) == []
    assert len(first) == 2
    assert len(second) == 1
    assert executing(db) == {"x": 3}
