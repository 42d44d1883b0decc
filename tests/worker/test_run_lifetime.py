"""A finished run leaves nothing behind for the cycle collector.

A worker makes a handful of objects per run (its context, lease, cancel scope, attempt). If
they form a reference cycle, reference counting never frees them: they pile up until a full
collection, whose pause grows with every run since the last one (a 200,000-run drain spent a
fifth of its time there). With the collector off, whatever a run left in a cycle is still
alive after the worker stops.

Not covered: a sync handler that raises. anyio's worker-thread call keeps the future that
carries the error in a frame the error's traceback holds, a cycle outside fairlane.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry, TriggerRequest, Worker
from fairlane.worker.run_state import ActiveRun
from tests.helpers import running, statuses, wait_until

pytestmark = pytest.mark.anyio

RUNS = 40


def _alive() -> list[object]:
    return [o for o in gc.get_objects() if isinstance(o, RunContext | ActiveRun)]


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_finished_runs_are_freed_without_the_cycle_collector(
    dsn: str, db: psycopg.Connection[Any], collector_off: None
) -> None:
    tasks = TaskRegistry()

    @tasks.task("noop")
    async def noop(ctx: RunContext, payload: Any) -> None:
        return None

    @tasks.task("broken")
    async def broken(ctx: RunContext, payload: Any) -> None:
        raise ValueError(f"run {ctx.run_id} fails")

    @tasks.task("noop_in_a_thread")
    def noop_in_a_thread(ctx: RunContext, payload: Any) -> None:
        return None

    requests = [TriggerRequest("noop") for _ in range(RUNS)]
    requests += [TriggerRequest("noop_in_a_thread") for _ in range(RUNS // 4)]
    requests += [TriggerRequest("broken", max_attempts=1) for _ in range(RUNS // 4)]
    async with AsyncClient(dsn) as client:
        await client.trigger_many(requests)
        assert _alive() == []
        async with running(Worker(tasks, dsn, concurrency=8)):
            await wait_until(
                lambda: statuses(db) == {"COMPLETED": RUNS + RUNS // 4, "FAILED": RUNS // 4},
                what="every run finished",
            )
    assert _alive() == []
