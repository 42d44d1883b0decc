"""Waiting inside an eager handler: children run right there and the wait returns their
results; what lives in the database (tokens, streamed batches) raises EagerModeError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fairlane import (
    AbortRun,
    AsyncClient,
    RunContext,
    RunStatus,
    TaskRegistry,
    TriggerRequest,
    WaitResult,
)
from fairlane.errors import EagerModeError, RunFailedError, TriggerOptionError
from fairlane.testing import eager
from fairlane.triggering.idempotency import stored_key
from tests.helpers import wait_attempts

pytestmark = pytest.mark.anyio

NOWHERE = "postgresql://127.0.0.1:9/nowhere?connect_timeout=2"


def registry(log: list[str]) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task()
    async def square(ctx: RunContext, payload: int) -> int:
        log.append(f"square {payload}")
        if payload < 0:
            raise AbortRun("negative")
        return payload * payload

    @tasks.task()
    async def fan_out(ctx: RunContext, payload: list[int]) -> dict[str, Any]:
        log.append("fan_out")
        one = await square.trigger_and_wait(ctx, payload[0])
        results = await ctx.batch_trigger_and_wait(square.requests(payload))
        try:
            await square.trigger_and_wait(ctx, -1)
        except RunFailedError as failed:
            child_failure = failed.status
        await ctx.wait_until(timedelta(hours=1))
        await ctx.wait_until(datetime.now(UTC) + timedelta(days=1))
        return {"one": one, "batch": [r.output for r in results], "failed": child_failure}

    @tasks.task()
    async def fire_and_wait(ctx: RunContext, payload: None) -> list[Any]:
        async with AsyncClient(NOWHERE) as client:
            started = await client.trigger("square", 4)  # fire and forget: runs right here
        waited = await ctx.wait_for_runs([started])
        return [waited[0].run_id == started, waited[0].output]

    @tasks.task()
    async def batch_with_a_bad_item(ctx: RunContext, payload: None) -> list[dict[str, Any]]:
        requests = [
            TriggerRequest("square", 2),
            TriggerRequest("square", 3, priority="x"),  # type: ignore[arg-type]
            TriggerRequest("square", -1),
        ]
        results = await ctx.batch_trigger_and_wait(requests)
        return [_shown(result) for result in results]

    @tasks.task()
    async def mixed_environments(ctx: RunContext, payload: None) -> None:
        await ctx.batch_trigger_and_wait(
            [TriggerRequest("square", 1), TriggerRequest("square", 2, environment="other")]
        )

    @tasks.task()
    async def waits_for_token(ctx: RunContext, payload: None) -> None:
        await ctx.wait_for_token(1)

    @tasks.task()
    async def waits_for_batch(ctx: RunContext, payload: None) -> None:
        await ctx.wait_for_batch(1)

    @tasks.task()
    async def waits_for_a_stored_run(ctx: RunContext, payload: None) -> None:
        await ctx.wait_for_runs([12345])

    return tasks


def _shown(result: WaitResult) -> dict[str, Any]:
    if result.ok:
        return {"ok": result.output}
    error = result.error or {}
    return {"status": error["status"], "code": error["error"]["code"]}


async def test_children_run_at_once_and_the_wait_returns_their_results() -> None:
    log: list[str] = []
    tasks = registry(log)
    with eager(tasks) as runs:
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger("fan_out", [2, 3]))
            fired = await client.wait_for_run(await client.trigger("fire_and_wait"))
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == {"one": 4, "batch": [4, 9], "failed": "FAILED"}
    assert log == ["fan_out", "square 2", "square 2", "square 3", "square -1", "square 4"]
    children = [child for child in runs if child.parent_run_id == run.id]
    assert [(child.payload, child.status) for child in children] == [
        (2, RunStatus.COMPLETED),
        (2, RunStatus.COMPLETED),
        (3, RunStatus.COMPLETED),
        (-1, RunStatus.FAILED),
    ]
    assert fired.result == [True, 16]


async def test_a_batch_item_that_cannot_trigger_is_pre_failed() -> None:
    tasks = registry([])
    with eager(tasks) as runs:
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger("batch_with_a_bad_item"))
            mixed = await client.wait_for_run(await client.trigger("mixed_environments"))
    assert run.result == [
        {"ok": 4},
        {"status": "SYSTEM_FAILURE", "code": "BATCH_ITEM_COULD_NOT_TRIGGER"},
        {"status": "FAILED", "code": "ABORTED"},
    ]
    assert [child.status for child in runs if child.parent_run_id == run.id] == [
        RunStatus.COMPLETED,
        RunStatus.SYSTEM_FAILURE,
        RunStatus.FAILED,
    ]
    assert mixed.status is RunStatus.FAILED
    assert mixed.error is not None
    # A child in another environment than its parent's is refused, as by a worker.
    assert mixed.error["type"] == f"{TriggerOptionError.__module__}.ForeignEnvironmentError"


@pytest.mark.parametrize(
    ("task", "says"),
    [
        ("waits_for_token", "tokens live in the database"),
        ("waits_for_batch", "batches live in the database"),
        ("waits_for_a_stored_run", "not a run of this eager block"),
    ],
)
async def test_waits_eager_mode_cannot_simulate_fail_the_run(task: str, says: str) -> None:
    with eager(registry([])):
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger(task))
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == f"{EagerModeError.__module__}.EagerModeError"
    assert says in run.error["message"]


@pytest.mark.parametrize("task", ["keyed_parent", "plain_parent"])
async def test_a_retried_parent_triggers_a_new_child_as_the_worker_does(task: str) -> None:
    """The handlers of tests/worker/test_wait_attempts.py: each attempt after a failure has its
    own child (keyed with scope "attempt", or unkeyed), and the parent completes on attempt 2."""
    with eager(wait_attempts.registry()) as runs:
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger(task, max_attempts=3))
    assert (run.status, run.attempts, run.result) == (RunStatus.COMPLETED, 2, [200, 2])
    children = [child for child in runs if child.parent_run_id == run.id]
    assert [(child.payload, child.status) for child in children] == [
        (1, RunStatus.FAILED),
        (2, RunStatus.COMPLETED),
    ]
    if task == "keyed_parent":
        keys = [stored_key("k", "attempt", parent_run_id=run.id, parent_attempt=n) for n in (1, 2)]
        assert [child.idempotency_key for child in children] == keys


async def test_a_retried_parent_makes_a_new_batch_as_the_worker_does() -> None:
    with eager(wait_attempts.registry()) as runs:
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger("batch_parent", max_attempts=3))
    assert (run.status, run.attempts, run.result) == (RunStatus.COMPLETED, 2, [1200, 200])
    assert [child.payload for child in runs if child.parent_run_id == run.id] == [11, 1, 12, 2]


async def test_steps_run_in_eager_handlers_sync_and_async() -> None:
    tasks = TaskRegistry()

    @tasks.task()
    async def stepping(ctx: RunContext, payload: int) -> list[Any]:
        doubled = await ctx.step("double", lambda n: {"n": n * 2}, payload)
        return [doubled, await ctx.step("tuple", lambda: (1, 2))]

    @tasks.task()
    def stepping_sync(ctx: RunContext, payload: int) -> Any:
        ctx.sync.wait_until(timedelta(hours=1))
        return ctx.sync.step("triple", lambda n: n * 3, payload)

    with eager(tasks):
        async with AsyncClient(NOWHERE) as client:
            run = await client.wait_for_run(await client.trigger("stepping", 4))
            sync_run = await client.wait_for_run(await client.trigger("stepping_sync", 5))
    # Through JSON, as a worker's step: a tuple comes back a list.
    assert run.result == [{"n": 8}, [1, 2]]
    assert (sync_run.status, sync_run.result) == (RunStatus.COMPLETED, 15), sync_run.error
