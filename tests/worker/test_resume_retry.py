"""A waiting run that is ready but finds no room in its queue asks again after a short
backoff, not after the worker's poll interval: nothing announces the slot that frees."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker, limits, trigger
from fairlane.waitpoints import complete_token, create_token
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio

POLL_INTERVAL_S = 30.0


async def test_a_ready_run_without_room_resumes_soon_after_the_slot_frees(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "serial", concurrency_limit=1)
    token = create_token(db)
    release_blocker = anyio.Event()
    tasks = TaskRegistry()

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: None) -> str:
        await ctx.wait_for_token(token)
        return "resumed"

    @tasks.task("blocker")
    async def blocker(ctx: RunContext, payload: None) -> None:
        await release_blocker.wait()

    waiting = trigger(db, "parent", queue="serial")
    worker = Worker(tasks, dsn, concurrency=4, poll_interval=POLL_INTERVAL_S)
    async with running(worker):
        await wait_until(lambda: run_status(db, waiting) == "WAITING", what="the parent waits")
        holder = trigger(db, "blocker", queue="serial")
        await wait_until(lambda: run_status(db, holder) == "EXECUTING", what="the slot taken")
        complete_token(db, token, "go")

        def ready_without_room() -> bool:
            row = db.execute(
                "SELECT resume_ready FROM fairlane.runs WHERE id = %s", (waiting,)
            ).fetchone()
            return row == (True,)

        await wait_until(ready_without_room, within=10, what="the parent ready, no room")
        release_blocker.set()
        await wait_until(lambda: run_status(db, holder) == "COMPLETED", what="the slot freed")
        # Well within the poll interval: the parent asked again after its backoff.
        await wait_until(
            lambda: run_status(db, waiting) == "COMPLETED", within=10, what="the parent resumed"
        )
