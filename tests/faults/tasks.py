"""A task registry for the worker command in the start-up tests."""

from __future__ import annotations

from fairlane import RunContext, TaskRegistry

tasks = TaskRegistry()


@tasks.task()
async def noop(ctx: RunContext, payload: object) -> None:
    return None
