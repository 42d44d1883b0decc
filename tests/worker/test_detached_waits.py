"""A handler that waits longer than ``wait_in_memory_s`` lets go of its run: the run waits
with no lease and no worker, and any worker replays it when the wait completes. Sync handlers
wait and run steps through ``ctx.sync`` the same way."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

from fairlane import Client, RunContext, TaskRegistry, trigger
from fairlane.waitpoints import complete_token, create_token
from tests.helpers import fast_worker, run_row, run_status, running, wait_until

pytestmark = pytest.mark.anyio


async def test_a_sync_handler_waits_and_steps_through_the_same_replay(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    ledger: Counter[str] = Counter()
    tasks = TaskRegistry()

    def stamp(label: str) -> str:
        ledger[label] += 1
        return label.upper()

    @tasks.task("sync_order")
    def sync_order(ctx: RunContext, payload: dict[str, int]) -> object:
        before = ctx.sync.step("before", stamp, "before")
        approval = ctx.sync.wait_for_token(payload["token"])
        ctx.sync.wait_until(0.01)
        after = ctx.sync.step("after", stamp, "after")
        return [before, approval.output, after]

    token = create_token(db)
    run_id = trigger(db, "sync_order", {"token": token})
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.detached.wait_for(run_id)
        assert run_row(db, run_id)["lease_token"] is None
        complete_token(db, token, "yes")
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="resumed")
    assert run_row(db, run_id)["result"] == ["BEFORE", "yes", "AFTER"]
    assert ledger == Counter({"before": 1, "after": 1})


async def test_another_worker_resumes_a_run_whose_worker_let_go_and_stopped(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    ledger: Counter[str] = Counter()
    tasks = TaskRegistry()

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: None) -> object:
        await ctx.step("side_effect", lambda: ledger.update(["effect"]))
        child = await ctx.trigger_and_wait("child", 21, queue="children")
        return child.output

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        return payload * 2

    run_id = trigger(db, "parent", None)
    first = fast_worker(tasks, dsn, wait_in_memory_s=0, queues=["default"])
    signals = first.enable_test_signals()
    # The child's queue is not the first worker's: the parent waits, and its worker stops.
    async with running(first):
        await signals.detached.wait_for(run_id)
    assert run_status(db, run_id) == "WAITING"
    async with running(fast_worker(tasks, dsn, wait_in_memory_s=0)):
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="replayed")
    assert run_row(db, run_id)["result"] == 42
    assert ledger["effect"] == 1


async def test_cancelling_a_run_that_waits_without_a_worker(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("waiter")
    async def waiter(ctx: RunContext, payload: dict[str, int]) -> None:
        await ctx.wait_for_token(payload["token"])

    token = create_token(db)
    run_id = trigger(db, "waiter", {"token": token})
    worker = fast_worker(tasks, dsn, wait_in_memory_s=0)
    signals = worker.enable_test_signals()
    async with running(worker):
        await signals.detached.wait_for(run_id)
        with Client(dsn) as client:
            client.cancel(run_id)
        complete_token(db, token, None)
    assert run_status(db, run_id) == "CANCELED"


async def test_a_short_wait_stays_in_memory_under_the_threshold(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("short")
    async def short(ctx: RunContext, payload: None) -> str:
        await ctx.wait_until(0.05)
        return "done"

    run_id = trigger(db, "short", None)
    worker = fast_worker(tasks, dsn, wait_in_memory_s=30)
    signals = worker.enable_test_signals()
    async with running(worker):
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="done")
    assert signals.detached.history == []
    assert signals.resumed.history == [run_id]
