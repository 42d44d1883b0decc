"""Pruning: finished runs past retention are deleted in bounded batches; live runs never."""

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
from tests.helpers import executing_run, insert_edges, run_status, running, statuses, wait_until
from tests.helpers.interleave import sessions

pytestmark = pytest.mark.anyio


def prune(db: psycopg.Connection[Any]) -> dict[str, int]:
    row = db.execute("SELECT fairlane.prune_finished_runs()").fetchone()
    assert row is not None
    return dict(row[0])


def test_old_finished_runs_are_deleted_in_batches(db: psycopg.Connection[Any]) -> None:
    finished = trigger_many(db, [TriggerRequest("t", i) for i in range(2500)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() - interval '8 days' "
        "WHERE id = ANY(%s)",
        (finished,),
    )
    recent = trigger_many(db, [TriggerRequest("t", i) for i in range(10)])
    db.execute(
        "UPDATE fairlane.runs SET status = 'FAILED', finished_at = now() WHERE id = ANY(%s)",
        (recent,),
    )
    trigger_many(db, [TriggerRequest("t", i) for i in range(10)])  # still queued
    maintenance.set_setting(db, "prune_batch_size", 1000)
    maintenance.set_setting(db, "prune_max_batches", 2)
    assert prune(db) == {"deleted": 2000, "waitpoints": 0, "statements": 2, "behind": True}
    assert prune(db) == {"deleted": 500, "waitpoints": 0, "statements": 1, "behind": False}
    assert prune(db) == {"deleted": 0, "waitpoints": 0, "statements": 1, "behind": False}
    assert statuses(db) == {"FAILED": 10, "QUEUED": 10}


async def test_the_runs_table_stays_small_under_a_soak(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    maintenance.set_setting(db, "prune_retention_s", 0.2)
    maintenance.configure_job(db, "prune_finished_runs", interval_s=0.1)
    tasks = TaskRegistry()

    @tasks.task("t")
    async def handler(ctx: RunContext, payload: Any) -> None:
        return None

    sizes = []
    async with running(Worker(tasks, dsn, concurrency=20, periodic_interval=0.05)):
        for wave in range(10):
            trigger_many(db, [TriggerRequest("t", i) for i in range(1000)])
            await wait_until(
                lambda: set(statuses(db)) <= {"COMPLETED"}, what=f"wave {wave} to finish"
            )
            sizes.append(sum(statuses(db).values()))
        await wait_until(lambda: sum(statuses(db).values()) == 0, what="everything pruned")
    # 10,000 runs went through; with 0.2 s retention the table only ever held the last few
    # waves (how many depends on how fast waves drain, so the bound leaves room for that).
    assert max(sizes) <= 4000, sizes


def age(db: psycopg.Connection[Any], days: int = 8) -> None:
    """Move every finished run, completed waitpoint and ended batch ``days`` into the past."""
    past = f"now() - interval '{days} days'"
    db.execute(f"UPDATE fairlane.runs SET finished_at = {past} WHERE finished_at IS NOT NULL")
    db.execute(
        f"UPDATE fairlane.waitpoints SET completed_at = {past} WHERE completed_at IS NOT NULL"
    )
    db.execute(f"UPDATE fairlane.batches SET completed_at = {past} WHERE completed_at IS NOT NULL")


def count(db: psycopg.Connection[Any], table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM fairlane.{table}").fetchone()
    assert row is not None
    return int(row[0])


def test_an_idempotency_key_outlives_run_retention(dsn: str, db: psycopg.Connection[Any]) -> None:
    """A run is kept while its key is active (30 days by default), whatever the retention, so
    a trigger with the key after pruning still returns it; once the key expired, the retention
    counts from the expiry."""
    with Client(dsn) as client:
        keyed = client.trigger("t", idempotency_key="order-7")
        plain = client.trigger("t")
        db.execute(
            "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() WHERE id = ANY(%s)",
            ([keyed, plain],),
        )
        age(db)
        assert prune(db)["deleted"] == 1
        assert client.trigger("t", idempotency_key="order-7") == keyed
        db.execute(
            "UPDATE fairlane.runs SET idempotency_key_expires_at = now() - interval '1 day'"
            " WHERE id = %s",
            (keyed,),
        )
        assert prune(db)["deleted"] == 0  # expired a day ago: kept for the retention after
        db.execute(
            "UPDATE fairlane.runs SET idempotency_key_expires_at = now() - interval '8 days'"
            " WHERE id = %s",
            (keyed,),
        )
        assert prune(db)["deleted"] == 1
        assert client.trigger("t", idempotency_key="order-7") != keyed


async def test_wait_edges_waitpoints_tokens_and_batches_are_pruned_with_the_runs(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: Any) -> int:
        return 1

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> None:
        await ctx.batch_trigger_and_wait([TriggerRequest("child", n) for n in range(3)])
        await ctx.wait_until(0.01)
        await ctx.wait_for_token(payload["token"])

    token = create_token(db)
    lonely = create_token(db)
    complete_token(db, lonely, "nobody waited")
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("default", 1)

        async def item() -> Any:
            yield b'{"task": "child", "payload": 9}\n'

        await batches.ingest(batch.id, item())
    async with AsyncClient(dsn) as client, running(Worker(tasks, dsn, poll_interval=0.05)):
        run_id = await client.trigger("parent", {"token": token})
        await wait_until(lambda: count(db, "run_waitpoints") == 6, what="the parent to wait")
        complete_token(db, token, "go")
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="the parent")
        await wait_until(lambda: statuses(db) == {"COMPLETED": 6}, what="every run")
    # 3 children, the parent's batch, a time, 2 tokens (none for the parentless batch).
    assert count(db, "waitpoints") == 7
    assert count(db, "batch_items") == 4

    age(db)
    assert prune(db) == {"deleted": 6, "waitpoints": 7, "statements": 1, "behind": False}
    row = db.execute("SELECT fairlane.prune_finished_batches()").fetchone()
    assert row is not None
    assert row[0] == {"batches": 2, "items": 4, "behind": False}
    for table in ("runs", "run_waitpoints", "waitpoints", "batches", "batch_items"):
        assert count(db, table) == 0, table


def test_a_token_being_waited_on_is_not_pruned_under_the_waiter(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The waiter locks the token before it adds its edge; the pruner skips what is locked and
    decides in a later statement: either the wait sees the token, or it is told it is gone."""
    parent, lease = executing_run(db, "parent")
    token = create_token(db)
    complete_token(db, token, "long ago")
    age(db)
    with sessions(dsn, 2) as (waiter, pruner):
        waiter.begin()
        waiter.run(query("lock_waitpoints", "fairlane"), {"waitpoint_ids": [token]})
        insert_edges(waiter, parent, [token])
        pruner.begin()
        assert pruner.run("SELECT fairlane.prune_tokens(now(), 100)") == [(0,)]
        pruner.commit()
        waiter.run(query("begin_waiting", "fairlane"), {"run_id": parent, "token": lease})
        waiter.commit()
    assert count(db, "waitpoints") == 1
    # With the waiter's edge there, the token stays; once it is gone, the token goes.
    assert db.execute("SELECT fairlane.prune_tokens(now(), 100)").fetchone() == (0,)
    db.execute("DELETE FROM fairlane.run_waitpoints")
    assert db.execute("SELECT fairlane.prune_tokens(now(), 100)").fetchone() == (1,)


def test_a_run_cancelled_while_it_waits_on_a_time_takes_the_time_with_it(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A time waitpoint belongs to the one run that waits on it: once that run is pruned, the
    waitpoint goes too, even if it never came due (cancelled long before its time)."""
    parent, lease = executing_run(db, "parent")
    row = db.execute(
        query("create_time_waitpoint", "fairlane"), {"at": None, "delay_s": 90 * 24 * 3600.0}
    ).fetchone()
    assert row is not None
    insert_edges(db, parent, [int(row[0])])
    waiting = db.execute(query("begin_waiting", "fairlane"), {"run_id": parent, "token": lease})
    assert waiting.fetchone() == ("WAITING",)
    db.execute(query("cancel_run", "fairlane"), {"id": parent})
    age(db)
    assert prune(db) == {"deleted": 1, "waitpoints": 1, "statements": 1, "behind": False}
    for table in ("runs", "run_waitpoints", "waitpoints"):
        assert count(db, table) == 0, table
