"""The executor returns how a run's attempt ended as a value for the writer, and reports the
handler's return to the run table; no database, no writer."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from fairlane import RunContext, TaskRegistry
from fairlane.worker.executor import execute, interrupted
from fairlane.worker.lease_store import Completion, Failure, Lease
from fairlane.worker.run_state import STOP_LEASE_LOST, STOP_SHUTDOWN, ActiveRun, RunState
from fairlane.worker.runs import RunTable
from tests.unit.test_run_table import new_run, state_of

pytestmark = pytest.mark.anyio


def _registry(gate: anyio.Event | None = None) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("t")
    async def handler(ctx: RunContext, payload: Any) -> Any:
        if payload == "fail":
            raise ValueError("no")
        if gate is not None:
            await gate.wait()
        return {"echo": payload}

    return tasks


def _claimed(payload: Any = None, attempt: int = 1) -> tuple[RunTable, ActiveRun]:
    table = RunTable(2)
    active = new_run(payload=payload, attempt=attempt)
    table.claimed(active)
    return table, active


async def _execute(table: RunTable, active: ActiveRun, registry: TaskRegistry) -> Any:
    with anyio.CancelScope() as shared:
        return await execute(active, registry, table, anyio.CapacityLimiter(1), shared)


async def test_a_result_is_a_completion() -> None:
    table, active = _claimed("hi")
    outcome = await _execute(table, active, _registry())
    assert outcome == Completion(active.lease, json.dumps({"echo": "hi"}, separators=(",", ":")))
    assert state_of(active) is RunState.RETURNED
    assert active.attempt is not None
    assert active.attempt.task == "t"


async def test_an_error_is_a_retry_while_attempts_are_left_then_a_failure() -> None:
    table, active = _claimed("fail", attempt=1)
    retry = await _execute(table, active, _registry())
    assert isinstance(retry, Failure)
    assert (retry.lease, retry.next_status) == (active.lease, "DELAYED")
    assert retry.retry_delay_s is not None
    table, last = _claimed("fail", attempt=3)
    final = await _execute(table, last, _registry())
    assert isinstance(final, Failure)
    assert (final.next_status, final.retry_delay_s) == ("FAILED", None)
    assert json.loads(final.error_json)["message"] == "no"


async def test_a_run_whose_lease_was_lost_before_it_started_leaves_nothing_to_write() -> None:
    table, active = _claimed()
    table.lease_lost(active)
    assert await _execute(table, active, _registry()) is None
    assert active.ctx.stop_reason == STOP_LEASE_LOST
    assert state_of(active) is RunState.RETURNED


async def test_a_shutdown_that_cuts_a_handler_short_hands_the_run_back() -> None:
    """In the runner's shared scope the stop's cancellation leaves through ``execute``: the
    runner asks ``interrupted`` for the outcome, the run's lease (a release)."""
    table, active = _claimed()
    gate = anyio.Event()
    outcome: Lease | Completion | Failure | None = None

    async def run() -> None:
        nonlocal outcome
        with anyio.CancelScope() as shared:
            try:
                await execute(active, _registry(gate), table, anyio.CapacityLimiter(1), shared)
            except BaseException:
                outcome = interrupted(active, table, shared)
                raise

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.wait_all_tasks_blocked()
        assert state_of(active) is RunState.RUNNING
        active.stop(STOP_SHUTDOWN)
    assert outcome == active.lease
    assert state_of(active) is RunState.RETURNED
