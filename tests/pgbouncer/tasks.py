"""Tasks for the workers behind PgBouncer (in-process and ``fairlane worker`` processes)."""

from __future__ import annotations

import anyio

from fairlane import RunContext, TaskRegistry, TriggerRequest

tasks = TaskRegistry()


@tasks.task("echo")
async def echo(ctx: RunContext, payload: int) -> int:
    return payload


@tasks.task("slow_echo")
async def slow_echo(ctx: RunContext, payload: int) -> int:
    """An echo that takes 50 ms, so that a drain outlasts its workers' starts."""
    await anyio.sleep(0.05)
    return payload


@tasks.task("parent")
async def parent(ctx: RunContext, payload: int) -> list[int]:
    """A child waited for alone, then three as a batch: every wait goes through the worker's
    wait connection, and the resumes are found by polling (no LISTEN)."""
    alone = await ctx.trigger_and_wait("echo", payload)
    batch = await ctx.batch_trigger_and_wait(
        [TriggerRequest("echo", payload + n) for n in range(1, 4)]
    )
    results = [alone, *batch]
    assert all(result.ok for result in results), results
    return [result.output for result in results]
