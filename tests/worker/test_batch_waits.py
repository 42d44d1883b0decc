"""A run waiting on a batch resumes when every item's run is final, with one result per item in
index order; ``batch_trigger_and_wait`` has the item semantics of a streamed batch."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane import (
    AsyncClient,
    RunContext,
    TaskRegistry,
    TriggerRequest,
    Worker,
    limits,
    maintenance,
    trigger,
)
from fairlane.batches import AsyncBatchClient
from fairlane.engine.sqlfiles import query
from fairlane.waitpoints import complete_token, create_token
from tests.helpers import executing_run, run_row, run_status, running, wait_until
from tests.helpers.interleave import sessions

pytestmark = pytest.mark.anyio


def summary(results: Any) -> list[Any]:
    """Each result's output, or its error code (a run's error is under ``error``)."""
    return [
        r.output if r.ok else {"error": (r.error.get("error") or r.error).get("code")}
        for r in results
    ]


def registry(gate: int | None = None) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        if gate is not None:
            await ctx.wait_for_token(gate)
        return payload * 10

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: dict[str, Any]) -> Any:
        requests = [TriggerRequest("child", n, **payload.get("options", {})) for n in range(4)]
        requests += [TriggerRequest(**extra) for extra in payload.get("extra", [])]
        return summary(await ctx.batch_trigger_and_wait(requests))

    return tasks


def worker(dsn: str, tasks: TaskRegistry) -> Worker:
    return Worker(tasks, dsn, poll_interval=0.05, periodic_interval=0.05, concurrency=8)


async def test_the_parent_resumes_when_every_child_is_final_not_when_they_exist(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    gate = create_token(db)
    async with AsyncClient(dsn) as client, running(worker(dsn, registry(gate))):
        parent = await client.trigger("parent", {})
        waiting_children = (
            "SELECT count(*) FROM fairlane.runs WHERE task = 'child' AND status = 'WAITING'"
        )
        await wait_until(
            lambda: db.execute(waiting_children).fetchone() == (4,), what="children waiting"
        )
        # Every item became its run and the batch completed; the parent keeps waiting.
        batch = db.execute("SELECT status, succeeded FROM fairlane.batches").fetchone()
        assert batch == ("COMPLETED", 4)
        assert run_status(db, parent) == "WAITING"
        complete_token(db, gate, "go")
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="the parent")
    assert run_row(db, parent)["result"] == [0, 10, 20, 30]


async def test_an_item_that_cannot_become_a_run_is_pre_failed_and_the_others_go_on(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    maintenance.set_setting(db, "batch_item_max_bytes", 64)
    extra = [
        {"task": "x" * 200},  # past the name limit: can never be triggered
        {"task": "child", "payload": "y" * 100},  # past the item size limit
        {"task": "child", "payload": 5},
    ]
    async with AsyncClient(dsn) as client, running(worker(dsn, registry())):
        parent = await client.trigger("parent", {"extra": extra})
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="the parent")
    assert run_row(db, parent)["result"] == [
        0,
        10,
        20,
        30,
        {"error": "BATCH_ITEM_COULD_NOT_TRIGGER"},
        {"error": "PAYLOAD_TOO_LARGE"},
        50,
    ]


async def test_the_item_cap_and_the_batch_rate_limit_apply(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    maintenance.set_setting(db, "batch_max_items", 3)
    async with AsyncBatchClient(dsn) as batches:
        await batches.set_limits("slow", refill_amount=0, bucket_max=2)
    async with AsyncClient(dsn) as client, running(worker(dsn, registry())):
        too_many = await client.trigger("parent", {}, max_attempts=1)
        await wait_until(lambda: run_status(db, too_many) == "FAILED", what="the cap")
        maintenance.set_setting(db, "batch_max_items", 1000)
        # A parent's batch is in its environment, charged to that environment's bucket.
        limited = await client.trigger("parent", {}, environment="slow", max_attempts=1)
        await wait_until(lambda: run_status(db, limited) == "FAILED", what="the rate limit")
    assert "BatchTooLargeError" in run_row(db, too_many)["error"]["type"]
    assert "BatchRateLimitedError" in run_row(db, limited)["error"]["type"]


async def test_children_a_full_queue_refuses_go_through_carriers_and_complete(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The inline trigger is refused (queue q holds 2), so the items go to carriers, which
    retry with backoff while the queue drains: every child still runs, in one call."""
    limits.set_queue(db, "default", "q", size_limit=2)
    async with AsyncClient(dsn) as client, running(worker(dsn, registry())):
        parent = await client.trigger("parent", {"options": {"queue": "q"}})
        await wait_until(
            lambda: run_status(db, parent) == "COMPLETED", what="the parent", within=60
        )
    assert run_row(db, parent)["result"] == [0, 10, 20, 30]
    carriers = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE task = 'fairlane.batch_item'"
    ).fetchone()
    assert carriers == (4,)


def batch_with_parent(db: psycopg.Connection[Any], dsn: str) -> tuple[int, int, Any]:
    """A parent claimed by hand and a one-item batch of its, whose item is already a run."""
    parent, token = executing_run(db, "parent")

    async def make() -> tuple[int, int]:
        async with AsyncBatchClient(dsn) as batches:
            batch = await batches.create("default", 1, parent_run_id=parent)

            async def item() -> Any:
                yield b'{"task": "child", "payload": 1}\n'

            await batches.ingest(batch.id, item())
            assert batch.waitpoint_id is not None
            return batch.id, batch.waitpoint_id

    batch_id, waitpoint = anyio.run(make)
    return parent, batch_id, (token, waitpoint)


def the_items_run(db: psycopg.Connection[Any]) -> int:
    """The run a carrier would make for the item (made here by hand)."""
    return trigger(db, "child", 1)


@pytest.mark.parametrize("ended_first", [True, False], ids=["batch-ended-first", "wait-first"])
def test_a_wait_on_a_batch_ending_meanwhile_waits_on_its_runs(
    dsn: str, db: psycopg.Connection[Any], ended_first: bool
) -> None:
    """The batch's waitpoint row is the meeting point: whoever completes it attaches the items'
    runs to the waits it sees, and a waiter that finds it complete attaches itself."""
    parent, batch_id, (token, waitpoint) = batch_with_parent(db, dsn)
    item_run = the_items_run(db)
    record = "SELECT fairlane.record_batch_item(%s, 0, %s, true, NULL)"
    edge = {
        "run_id": parent,
        "attempt": 1,
        "position": 0,
        "items": [-1],
        "waitpoint_ids": [waitpoint],
    }
    with sessions(dsn, 2) as (finisher, waiter):
        finisher.begin()
        waiter.begin()
        if ended_first:
            finisher.run(record, (batch_id, item_run))
            locking = waiter.start(
                query("lock_waitpoints", "fairlane"), {"waitpoint_ids": [waitpoint]}
            )
            waiter.blocked()
            finisher.commit()
            locking.result(timeout=30)
        else:
            waiter.run(query("lock_waitpoints", "fairlane"), {"waitpoint_ids": [waitpoint]})
        waiter.run(query("insert_wait_edges", "fairlane"), edge)
        waiter.run(
            query("attach_batch_waiter", "fairlane"), {"batch_id": batch_id, "run_id": parent}
        )
        waiter.run(query("begin_waiting", "fairlane"), {"run_id": parent, "token": token})
        if ended_first:
            waiter.commit()
        else:
            recording = finisher.start(record, (batch_id, item_run))
            finisher.blocked()
            waiter.commit()
            recording.result(timeout=30)
            finisher.commit()
    edges = db.execute(
        "SELECT item FROM fairlane.run_waitpoints WHERE run_id = %s ORDER BY item", (parent,)
    ).fetchall()
    assert edges == [(-1,), (0,)]
    row = db.execute("SELECT status, resume_ready FROM fairlane.runs WHERE id = %s", (parent,))
    assert row.fetchone() == ("WAITING", False)  # its item's run has not run yet
