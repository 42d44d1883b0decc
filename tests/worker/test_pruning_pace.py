"""Pruning at the pace of a sustained rate: a tick deletes until caught up or its budget is
spent, a tick that stopped with work left runs again at the next call, and a prune of many
batches still keeps what a user can see (a live idempotency key, a waitpoint being waited on,
a batch in progress and its runs)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import (
    AsyncClient,
    Client,
    RunContext,
    TaskRegistry,
    TriggerRequest,
    Worker,
    maintenance,
    trigger_many,
)
from fairlane.batches import AsyncBatchClient
from fairlane.engine.sqlfiles import query
from fairlane.waitpoints import complete_token, create_token
from tests.helpers import executing_run, insert_edges, run_row, run_status, running, wait_until
from tests.worker.test_pruning import age, count, prune

pytestmark = pytest.mark.anyio

JOB = "prune_finished_runs"


def history(db: psycopg.Connection[Any], runs: int) -> list[int]:
    """``runs`` runs that completed long before any retention."""
    ids = trigger_many(db, [TriggerRequest("t", i) for i in range(runs)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() - interval '8 days'"
        " WHERE id = ANY(%s)",
        (ids,),
    )
    return ids


def job_row(db: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT next_due_at, next_due_at <= now(), last_result FROM fairlane.periodic_jobs"
        " WHERE name = %s",
        (JOB,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_tick_ends_when_its_budget_is_spent(db: psycopg.Connection[Any]) -> None:
    history(db, 2500)
    maintenance.set_setting(db, "prune_batch_size", 1000)
    maintenance.set_setting(db, "prune_budget_s", 0)
    assert prune(db) == {"deleted": 1000, "waitpoints": 0, "statements": 1, "behind": True}
    maintenance.set_setting(db, "prune_budget_s", 3600)
    assert prune(db) == {"deleted": 1500, "waitpoints": 0, "statements": 2, "behind": False}


def test_a_tick_that_is_behind_runs_again_at_the_next_call_on_its_grid(
    db: psycopg.Connection[Any],
) -> None:
    """Not an interval later: at once. And once caught up, the next tick is the one the
    interval's grid named, so catching up does not shift the later ticks."""
    history(db, 2500)
    maintenance.set_setting(db, "prune_batch_size", 1000)
    maintenance.set_setting(db, "prune_max_batches", 1)
    db.execute("UPDATE fairlane.periodic_jobs SET next_due_at = now() WHERE name = %s", (JOB,))
    first_due = job_row(db)[0]
    interval_s = next(job.interval_s for job in maintenance.list_jobs(db) if job.name == JOB)
    deleted = []
    for _ in range(3):
        ran = maintenance.run_due(db)
        deleted.append(ran[JOB]["deleted"])
        due_at, due_now, last = job_row(db)
        assert last["behind"] is due_now
    assert deleted == [1000, 1000, 500]
    assert due_now is False
    assert (due_at - first_due).total_seconds() == interval_s
    assert count(db, "runs") == 0


def test_a_prune_of_many_batches_keeps_keys_and_waited_on_waitpoints(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    history(db, 3000)
    with Client(dsn) as client:
        keyed = client.trigger("t", idempotency_key="kept-at-pace")
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() WHERE id = %s",
        (keyed,),
    )
    # A pending token and a token completed long ago whose waiter has not resumed yet.
    waiter, lease = executing_run(db, "waiter")
    pending, completed = create_token(db), create_token(db)
    complete_token(db, completed, "long ago")
    insert_edges(db, waiter, [pending, completed])
    db.execute(query("begin_waiting", "fairlane"), {"run_id": waiter, "token": lease})
    age(db)
    maintenance.set_setting(db, "prune_batch_size", 100)
    maintenance.set_setting(db, "prune_budget_s", 3600)
    maintenance.set_setting(db, "prune_max_batches", 1000)
    outcome = prune(db)
    assert outcome["deleted"] == 3000
    assert outcome["statements"] > 3000 // 100
    assert outcome["behind"] is False
    assert run_status(db, keyed) == "COMPLETED"
    with Client(dsn) as client:
        assert client.trigger("t", idempotency_key="kept-at-pace") == keyed
    assert run_status(db, waiter) == "WAITING"
    assert count(db, "run_waitpoints") == 2
    assert count(db, "waitpoints") == 2


def batch_tasks(dsn: str) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        return payload * 10

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> list[Any]:
        async with AsyncBatchClient(dsn) as batches:
            batch = await batches.create(
                "default", 2, parent_run_id=ctx.run_id, idempotency_key=f"pace-{ctx.run_id}"
            )
        return [result.output for result in await ctx.wait_for_batch(batch.id)]

    return tasks


async def item(index: int) -> Any:
    yield f'{{"task": "child", "payload": {index}}}\n'.encode()


async def test_a_prune_of_many_batches_keeps_the_runs_of_a_batch_in_progress(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The batch reads its items' runs when it ends (the runs waiting on it get one result per
    item): a run that finished long ago stays while its batch is in progress."""
    worker = Worker(batch_tasks(dsn), dsn, poll_interval=0.05, run_periodic_jobs=False)
    async with AsyncClient(dsn) as client, running(worker), AsyncBatchClient(dsn) as batches:
        parent = await client.trigger("parent")
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="the parent to wait")
        row = db.execute("SELECT id FROM fairlane.batches").fetchone()
        assert row is not None
        batch = int(row[0])
        await batches.ingest(batch, item(0))
        done = "SELECT count(*) FROM fairlane.runs WHERE task = 'child' AND status = 'COMPLETED'"
        await wait_until(lambda: db.execute(done).fetchone() == (1,), what="the first item")
        history(db, 1000)
        age(db)
        maintenance.set_setting(db, "prune_batch_size", 100)
        maintenance.set_setting(db, "prune_budget_s", 3600)
        outcome = prune(db)
        assert outcome["statements"] > 1000 // 100
        assert db.execute(done).fetchone() == (1,)
        await batches.ingest(batch, item(1), first_index=1)
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="the parent")
    assert run_row(db, parent)["result"] == [0, 10]
