"""Test signals (fairlane.worker.signals): a test awaits what a worker's runs went through
instead of sleeping through a window in which nothing should happen."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.worker.run_state import RunState
from tests.helpers import fast_worker, run_row, running

pytestmark = pytest.mark.anyio


async def test_signals_follow_a_run_through_its_states(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    gate = anyio.Event()

    @tasks.task("gated")
    async def gated(ctx: RunContext, payload: int) -> int:
        await gate.wait()
        return payload

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        return payload + 1

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: int) -> Any:
        return (await ctx.trigger_and_wait("child", payload)).output

    worker = fast_worker(tasks, dsn, concurrency=1)
    signals = worker.enable_test_signals()
    assert worker.signals is signals
    async with AsyncClient(dsn) as client, running(worker):
        held = await client.trigger("gated", 7)
        assert await signals.claimed.next() == held
        assert await signals.started.next() == held
        # The one slot is taken: nothing more is claimed while the handler is blocked.
        queued = await client.trigger("gated", 8)
        assert worker.runs.free == 0
        assert worker.held[held].state is RunState.RUNNING
        assert run_row(db, queued)["status"] == RunStatus.QUEUED.value
        gate.set()
        await signals.released.wait_for(held)
        await signals.released.wait_for(queued)
        assert signals.claimed.history == [held, queued]

        waiting = await client.trigger("parent", 1)
        assert await signals.waiting.wait_for(waiting) == waiting
        # The waiting parent gave its slot up: its child runs in it.
        await signals.released.wait_for(lambda run_id: run_id != waiting)
        assert await signals.resumed.wait_for(waiting) == waiting
        await signals.released.wait_for(waiting)
    assert run_row(db, waiting)["result"] == 2
    assert signals.slot_freed.history, "each freed slot was announced"
    assert not worker.held


async def test_signals_are_off_unless_asked_for(dsn: str) -> None:
    worker = fast_worker(TaskRegistry(), dsn)
    assert worker.signals is None
