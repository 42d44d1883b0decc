"""Tasks for the workers behind PgBouncer (in-process and ``fairlane worker`` processes)."""

from __future__ import annotations

from fairlane import RunContext, TaskRegistry, TriggerRequest

tasks = TaskRegistry()


@tasks.task("echo")
async def echo(ctx: RunContext, payload: int) -> int:
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
