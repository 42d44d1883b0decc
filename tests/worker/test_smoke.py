from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry, Worker
from tests.helpers import running, statuses, wait_until

pytestmark = pytest.mark.anyio


async def test_worker_drains_triggered_runs(dsn: str, db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()

    @tasks.task("double")
    async def double(ctx: RunContext, payload: int) -> int:
        return payload * 2

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("double", 21)
        async with running(Worker(tasks, dsn, concurrency=4)):
            await wait_until(lambda: statuses(db).get("COMPLETED") == 1, what="completion")
        run = await client.get_run(run_id)
    assert run.result == 42
    assert run.attempts == 1
    assert run.lease_token is None
