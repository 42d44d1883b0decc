"""A runner keeps one cancel scope across the runs it executes, until a stop cancels it
(worker/executor.py): the stop cuts short only the run it was meant for, the runner's next
runs are not cancelled by it, and a handler that catches the cancellation and returns still
has its outcome and hooks. One runner (concurrency 1) executes every run here, and the runs
after a stop await several times, where a scope still cancelled would cut them short too."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from tests.helpers import fast_worker, run_row, running, wait_until

pytestmark = pytest.mark.anyio


def _registry(
    started: anyio.Event, caught: list[int], finished: list[int], on_success: Any = None
) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("long", on_success=on_success)
    async def long(ctx: RunContext, payload: str) -> str:
        started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            caught.append(ctx.run_id)
            if payload == "propagate":
                raise
        # "swallow": the handler catches the stop and returns anyway.
        return "returned after the stop"

    @tasks.task("short")
    async def short(ctx: RunContext, payload: int) -> int:
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        finished.append(payload)
        return payload

    return tasks


@pytest.mark.parametrize("handler", ["propagate", "swallow"])
async def test_a_cancel_cuts_short_only_its_run_and_the_runner_goes_on(
    dsn: str, db: psycopg.Connection[Any], handler: str
) -> None:
    started, caught, finished = anyio.Event(), list[int](), list[int]()
    worker = fast_worker(_registry(started, caught, finished), dsn, concurrency=1)
    async with AsyncClient(dsn) as client, running(worker):
        long_id = await client.trigger("long", handler)
        with anyio.fail_after(10):
            await started.wait()
        await client.cancel(long_id)
        await wait_until(lambda: caught == [long_id], what="the handler to be cancelled")
        short_ids = [await client.trigger("short", n) for n in range(3)]
        await wait_until(lambda: sorted(finished) == [0, 1, 2], what="the next runs")
        await wait_until(lambda: not worker.held, what="every run to be let go")
    assert run_row(db, long_id)["status"] == RunStatus.CANCELED.value
    assert run_row(db, long_id)["result"] is None, "the cancel ended it: no outcome written"
    assert [run_row(db, run_id)["status"] for run_id in short_ids] == ["COMPLETED"] * 3
    assert (worker.stats.canceled, worker.stats.completed, worker.stats.stale_writes) == (1, 3, 0)


async def test_a_handler_that_returns_after_a_shutdown_stop_keeps_its_outcome_and_hook(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The stop that ended the handler does not cancel what follows it: the async on_success
    hook awaits, and the result is written."""
    hooked: list[Any] = []

    async def on_success(ctx: RunContext, result: Any) -> None:
        await anyio.sleep(0.01)
        hooked.append(result)

    started, caught, finished = anyio.Event(), list[int](), list[int]()
    tasks = _registry(started, caught, finished, on_success)
    worker = fast_worker(tasks, dsn, concurrency=1, shutdown_grace=0.1)
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("long", "swallow")
        async with running(worker):
            with anyio.fail_after(10):
                await started.wait()
    assert caught == [run_id]
    assert hooked == ["returned after the stop"]
    row = run_row(db, run_id)
    assert (row["status"], row["result"]) == ("COMPLETED", "returned after the stop")
