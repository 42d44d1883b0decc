"""Shared test helpers: running a worker in the background, polling until a condition holds."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg

from fairlane import RunStatus, Worker


@asynccontextmanager
async def running(*workers: Worker) -> AsyncIterator[None]:
    """Run workers for the duration of the block, then stop them gracefully."""
    async with anyio.create_task_group() as group:
        for worker in workers:
            await group.start(worker.run)
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()


async def wait_until(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll ``predicate`` until it is true; fail with ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        outcome = predicate()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await anyio.sleep(interval)


def statuses(db: psycopg.Connection[Any], schema: str = "fairlane") -> dict[str, int]:
    rows = db.execute(f"SELECT status, count(*) FROM {schema}.runs GROUP BY status").fetchall()
    return {status: count for status, count in rows}


def run_status(db: psycopg.Connection[Any], run_id: int) -> RunStatus:
    row = db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None, f"run {run_id} does not exist"
    return RunStatus(row[0])
