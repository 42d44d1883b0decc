"""Batch carriers never count toward a user's limits, and any worker processes them.

A carrier (task fairlane.batch_item, queue __batches__) only turns an item into its run; the
item's run is what the environment's limits are for. So carriers take no room under the
environment's size limit and no slot under its concurrency cap (the __batches__ queue keeps
its own cap, the batch concurrency), and a worker restricted to some queues still processes
the carriers of the environments it serves.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker, limits, trigger
from fairlane.batches import AsyncBatchClient
from fairlane.errors import QueueSizeLimitExceeded, TriggerOptionError
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_row, chunked, ndjson

pytestmark = pytest.mark.anyio


def tasks() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    return registry


async def batch_of(dsn: str, environment: str, count: int, **options: Any) -> int:
    """A sealed batch of ``count`` echo items with trigger ``options``."""
    items = [{"task": "echo", "payload": i, "options": options} for i in range(count)]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create(environment, count)
        result = await batches.ingest(batch.id, chunked(ndjson(items), 4096))
    assert result.sealed
    return batch.id


def runs_by_queue(db: psycopg.Connection[Any], status: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT queue, count(*) FROM fairlane.runs WHERE status = %s GROUP BY queue", (status,)
    ).fetchall()
    return dict(rows)


def finished(db: psycopg.Connection[Any], batch_id: int) -> bool:
    return batch_row(db, batch_id)["status"] in ("COMPLETED", "PARTIAL_FAILED")


# -- size limits -------------------------------------------------------------------------


async def test_queued_carriers_take_no_room_under_the_environments_size_limit(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "env", size_limit=10)
    await batch_of(dsn, "env", 20)
    assert runs_by_queue(db, "QUEUED") == {"__batches__": 20}
    for i in range(10):
        trigger(db, "echo", i, environment="env")
    # The limit still holds for the environment's own runs.
    with pytest.raises(QueueSizeLimitExceeded):
        trigger(db, "echo", 10, environment="env")


async def test_a_batch_larger_than_the_size_limit_triggers_every_item(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "env", size_limit=10)
    batch_id = await batch_of(dsn, "env", 20)
    async with running(Worker(tasks(), dsn, concurrency=8, poll_interval=0.05)):
        await wait_until(lambda: finished(db, batch_id), what="batch finished")
        state = batch_row(db, batch_id)
        assert (state["status"], state["succeeded"], state["failed"]) == ("COMPLETED", 20, 0)
        await wait_until(
            lambda: runs_by_queue(db, "COMPLETED").get("default") == 20, what="items ran"
        )


# -- concurrency caps --------------------------------------------------------------------


async def test_carriers_and_user_runs_do_not_share_the_environments_cap(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_environment(db, "env", concurrency_limit=1)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # Carriers executing leave the environment's one slot to a user run.
        await batch_of(dsn, "env", 3)
        carriers = await store.claim(conn, 10)
        assert [run.queue for run in carriers] == ["__batches__"] * 3
        user = trigger(db, "echo", None, environment="env")
        claimed = await store.claim(conn, 10)
        assert [run.id for run in claimed] == [user]
        assert await store.claim(conn, 10) == [], "the cap of 1 holds for user runs"
        # A user run holding the slot leaves the carriers to run.
        await batch_of(dsn, "env", 2)
        claimed = await store.claim(conn, 10)
        assert [run.queue for run in claimed] == ["__batches__"] * 2
    # The batch concurrency still caps the carriers themselves.
    async with AsyncBatchClient(dsn) as batches:
        await batches.set_limits("env", concurrency=2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await batch_of(dsn, "env", 4)
        claimed = await store.claim(conn, 10, environments=["env"])
        assert claimed == [], "five carriers are executing: more than the batch concurrency"


async def test_a_waiting_run_resumes_while_carriers_execute(
    dsn: str, db: psycopg.Connection[Any], store: LeaseStore
) -> None:
    limits.set_environment(db, "env", concurrency_limit=1)
    token = uuid.uuid4()
    row = db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, max_attempts, "
        "attempts, lease_token, lease_until, resume_ready) "
        "VALUES ('env', 'default', 'echo', 'null', 'WAITING', 1, 1, %s, "
        "now() + interval '1 minute', true) RETURNING id",
        (token,),
    ).fetchone()
    assert row is not None
    await batch_of(dsn, "env", 2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        carriers = await store.claim(conn, 10)
        assert [run.queue for run in carriers] == ["__batches__"] * 2
    resumed = db.execute("SELECT fairlane.resume_run(%s, %s)", (row[0], token)).fetchone()
    assert resumed == ("RESUMED",)


async def test_carriers_are_processed_while_a_user_run_holds_the_only_slot(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_environment(db, "env", concurrency_limit=1)
    registry = tasks()
    release = anyio.Event()

    @registry.task("hold")
    async def hold(ctx: RunContext, payload: Any) -> str:
        await release.wait()
        return "released"

    held = trigger(db, "hold", None, environment="env")
    async with running(Worker(registry, dsn, concurrency=8, poll_interval=0.05)):
        try:
            await wait_until(
                lambda: runs_by_queue(db, "EXECUTING") == {"default": 1}, what="hold running"
            )
            batch_id = await batch_of(dsn, "env", 5)
            await wait_until(lambda: finished(db, batch_id), what="batch finished")
            # Every item became a run and waits for the slot the user run still holds; the
            # carriers' own completions follow.
            assert batch_row(db, batch_id)["succeeded"] == 5
            await wait_until(
                lambda: runs_by_queue(db, "COMPLETED") == {"__batches__": 5},
                what="carriers completed",
            )
            assert runs_by_queue(db, "EXECUTING") == {"default": 1}
            assert runs_by_queue(db, "QUEUED") == {"default": 5}
        finally:
            release.set()
        await wait_until(lambda: runs_by_queue(db, "COMPLETED").get("default") == 6, what="all ran")
    status = db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (held,)).fetchone()
    assert status == ("COMPLETED",)


def test_the_carriers_queue_is_not_open_to_triggers(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(TriggerOptionError) as refused:
        trigger(db, "echo", None, environment="env", queue="__batches__")
    assert refused.value.option == "queue"
    assert "reserved" in str(refused.value)
    assert db.execute("SELECT count(*) FROM fairlane.runs").fetchone() == (0,)


# -- queue filters -----------------------------------------------------------------------


async def test_a_worker_restricted_to_some_queues_processes_batches(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    batch_id = await batch_of(dsn, "env", 6, queue="q")
    worker = Worker(tasks(), dsn, concurrency=4, poll_interval=0.05, queues=["q"])
    async with running(worker):
        await wait_until(lambda: finished(db, batch_id), what="batch finished", within=10)
        await wait_until(lambda: runs_by_queue(db, "COMPLETED").get("q") == 6, what="items ran")
    assert batch_row(db, batch_id)["succeeded"] == 6
