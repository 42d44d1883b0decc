"""Idle workers wake on LISTEN/NOTIFY; without it (PgBouncer) they still drain by polling."""

from __future__ import annotations

import time
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry, TriggerRequest, Worker, limits
from fairlane.batches import AsyncBatchClient
from fairlane.errors import QueueSizeLimitExceeded
from tests.helpers import announced, running, statuses, wait_until

pytestmark = pytest.mark.anyio


def listening(db: psycopg.Connection[Any]) -> bool:
    """Some session of this database has subscribed to the runs channel."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query ILIKE 'LISTEN %%'"
    ).fetchone()
    return bool(row and row[0])


async def test_idle_worker_is_woken_by_notify(dsn: str, db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()
    started: dict[str, float] = {}

    @tasks.task("ping")
    async def ping(ctx: RunContext, payload: str) -> str:
        started[payload] = time.monotonic()
        return payload

    # Polling every 30 s cannot explain a start within seconds; and no periodic jobs, whose
    # notifications could wake the worker too.
    worker = Worker(tasks, dsn, poll_interval=30.0, run_periodic_jobs=False)
    async with AsyncClient(dsn) as client, running(worker):
        await wait_until(
            lambda: listening(db) and worker.stats.wakeups >= 1 and worker.stats.claims >= 1,
            within=5,
            what="the worker to listen",
        )
        for name in ("first", "second"):
            wakeups = worker.stats.wakeups
            triggered = time.monotonic()
            await client.trigger("ping", name)
            await wait_until(lambda n=name: n in started, within=5, what=f"the {name} run")
            assert started[name] - triggered < 5.0
            assert worker.stats.wakeups > wakeups
            await wait_until(lambda: worker.stats.completed == len(started), within=5)
        # The second run came while the worker was certainly idle in its 30 s wait.


@pytest.mark.parametrize("theirs", ["theirs", "*"])
async def test_notification_for_another_environment_does_not_wake(
    dsn: str, db: psycopg.Connection[Any], theirs: str
) -> None:
    """Nor does one for an environment named ``*``: only an empty payload, a name no
    environment has, asks every worker for a full scan."""
    tasks = TaskRegistry()

    @tasks.task("ping")
    async def ping(ctx: RunContext, payload: None) -> None:
        return None

    worker = Worker(tasks, dsn, poll_interval=30.0, environments=["mine"], run_periodic_jobs=False)
    async with AsyncClient(dsn) as client, running(worker):
        await wait_until(
            lambda: listening(db) and worker.stats.wakeups >= 1, within=5, what="listening"
        )
        wakeups = worker.stats.wakeups
        await client.trigger("ping", environment=theirs)
        await client.trigger("ping", environment="mine")
        await wait_until(lambda: worker.stats.completed == 1, within=5, what="my run")
        assert worker.stats.wakeups == wakeups + 1
    assert statuses(db) == {"COMPLETED": 1, "QUEUED": 1}


async def test_polling_worker_drains_runs_triggered_while_it_runs(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    done: list[int] = []

    @tasks.task("count")
    async def count(ctx: RunContext, payload: int) -> int:
        done.append(payload)
        return payload

    worker = Worker(tasks, dsn, listen=False, poll_interval=0.1, concurrency=8)
    async with AsyncClient(dsn) as client, running(worker):
        for chunk in range(10):
            await client.trigger_many([TriggerRequest("count", chunk * 20 + i) for i in range(20)])
            await anyio.sleep(0.02)  # spread the triggers over the worker's life
        await wait_until(lambda: statuses(db).get("COMPLETED") == 200, within=20, what="drain")
    assert sorted(done) == list(range(200))
    assert worker.stats.wakeups == 0
    assert not listening(db)


async def test_every_trigger_path_announces_its_environment_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute('LISTEN "fairlane.runs"')
    async with AsyncClient(dsn) as client:
        await client.trigger_many(
            [TriggerRequest("t", i, environment=env) for i, env in enumerate("aabbb")]
        )
        assert announced(db) == ["a", "b"]
        await client.trigger("t", environment="c", idempotency_key="k1")
        await client.trigger_many(
            [TriggerRequest("t", i, environment="d", idempotency_key=f"d{i}") for i in range(3)]
        )
        assert announced(db) == ["c", "d"]
        # Not claimable yet: promotion announces them when they are due.
        await client.trigger("t", environment="e", delay=60)
        await client.trigger("t", environment="f", delay=60, idempotency_key="k2")
        assert announced(db) == []


async def test_a_refused_trigger_announces_nothing(dsn: str, db: psycopg.Connection[Any]) -> None:
    limits.set_queue(db, "f", "default", size_limit=2)
    db.execute('LISTEN "fairlane.runs"')
    async with AsyncClient(dsn) as client:
        with pytest.raises(QueueSizeLimitExceeded):
            await client.trigger_many(
                [TriggerRequest("t", i, environment=env) for i, env in enumerate("aafff")]
            )
        assert announced(db) == []
        assert statuses(db) == {}
        await client.trigger_many(
            [TriggerRequest("t", i, environment=env) for i, env in enumerate("aff")]
        )
        assert announced(db) == ["a", "f"]


async def test_a_change_of_limits_announces_what_it_may_have_made_claimable(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Unpausing, or raising a cap or a rate, makes queued runs claimable without a trigger:
    the change wakes the environment's idle workers (every worker's, for the scheduler's)."""
    db.execute('LISTEN "fairlane.runs"')
    limits.set_environment(db, "p", paused=True)
    assert announced(db) == [], "a paused environment has nothing to claim"
    limits.set_environment(db, "p", paused=False)
    assert announced(db) == ["p"]
    limits.set_environment(db, "p", concurrency_limit=5)
    assert announced(db) == ["p"]
    limits.set_queue(db, "q", "default", paused=True)
    assert announced(db) == []
    limits.set_queue(db, "q", "default", paused=False, concurrency_limit=3)
    assert announced(db) == ["q"]
    limits.set_scheduler(db, global_concurrency_limit=100)
    assert announced(db) == [""], "every environment: a full scan"


async def test_a_change_of_the_batch_concurrency_announces_the_environment(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Raising the batch concurrency may make queued carriers claimable: the environment's
    idle workers are woken, once its carriers' queue exists and is not paused."""
    db.execute('LISTEN "fairlane.runs"')
    async with AsyncBatchClient(dsn) as batches:
        await batches.set_limits("no-batches-yet", concurrency=3)
        assert announced(db) == [], "no carriers' queue: nothing to claim"
        db.execute(
            "INSERT INTO fairlane.queues (environment, name, concurrency_limit)"
            " VALUES ('b', '__batches__', 1), ('held', '__batches__', 1)"
        )
        db.execute("UPDATE fairlane.queues SET paused = true WHERE environment = 'held'")
        await batches.set_limits("b", concurrency=5)
        assert announced(db) == ["b"]
        await batches.set_limits("held", concurrency=5)
        assert announced(db) == [], "its carriers' queue is paused"


async def test_an_idle_worker_starts_an_unpaused_environment_s_runs_at_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("ping")
    async def ping(ctx: RunContext, payload: None) -> None:
        return None

    limits.set_environment(db, "held", paused=True)
    async with AsyncClient(dsn) as client:
        await client.trigger("ping", environment="held")
    # Polling every 30 s cannot explain a start within seconds.
    worker = Worker(tasks, dsn, poll_interval=30.0, run_periodic_jobs=False)
    async with running(worker):
        await wait_until(
            lambda: listening(db) and worker.stats.claims >= 1, within=5, what="listening"
        )
        assert worker.stats.completed == 0, "paused"
        limits.set_environment(db, "held", paused=False)
        await wait_until(lambda: worker.stats.completed == 1, within=5, what="the unpaused run")
