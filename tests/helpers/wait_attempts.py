"""Parents that fail on their first attempt after a wait, for the worker and eager mode alike:
each retried attempt must start its own waits (tests/worker/test_wait_attempts.py,
tests/testing/test_eager_waits.py)."""

from __future__ import annotations

import time

from fairlane import RunContext, TaskRegistry, TriggerRequest
from fairlane.retry import Backoff

FAST = Backoff(min_s=0.05, max_s=0.1)
WAIT_S = 0.3


def registry() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        if payload == 1:
            raise ValueError("the first attempt's child fails")
        return payload * 100

    @tasks.task("keyed_parent", backoff=FAST)
    async def keyed_parent(ctx: RunContext, payload: None) -> list[int]:
        result = await ctx.trigger_and_wait(
            "child",
            ctx.attempt,
            max_attempts=1,
            idempotency_key="k",
            idempotency_scope="attempt",
        )
        if not result.ok:
            raise RuntimeError("the child failed")
        return [result.output, ctx.attempt]

    @tasks.task("plain_parent", backoff=FAST)
    async def plain_parent(ctx: RunContext, payload: None) -> list[int]:
        result = await ctx.trigger_and_wait("child", ctx.attempt, max_attempts=1)
        if not result.ok:
            raise RuntimeError("the child failed")
        return [result.output, ctx.attempt]

    @tasks.task("batch_parent", backoff=FAST)
    async def batch_parent(ctx: RunContext, payload: None) -> list[int]:
        requests = [
            TriggerRequest("child", ctx.attempt + 10, max_attempts=1),
            TriggerRequest("child", ctx.attempt, max_attempts=1),
        ]
        results = await ctx.batch_trigger_and_wait(requests)
        if not all(result.ok for result in results):
            raise RuntimeError("an item failed")
        return [result.output for result in results]

    @tasks.task("sleeping_parent", backoff=FAST)
    async def sleeping_parent(ctx: RunContext, payload: None) -> float:
        started = time.monotonic()
        await ctx.wait_until(WAIT_S)
        if ctx.attempt == 1:
            raise RuntimeError("fails after its wait")
        return time.monotonic() - started

    return tasks
