"""GET /api/v1/workers: the registry and the unserved tasks, for an admin key only."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, TriggerRequest, Worker, trigger_many
from tests.helpers import running

pytestmark = pytest.mark.anyio


async def test_an_admin_key_reads_the_registry(
    as_admin: httpx.AsyncClient, db: psycopg.Connection[Any], dsn: str
) -> None:
    tasks = TaskRegistry()

    @tasks.task("mail")
    async def mail(ctx: RunContext, payload: Any) -> None:
        return None

    trigger_many(
        db,
        [TriggerRequest("bill", environment="env-a"), TriggerRequest("mail", environment="env-b")],
    )
    db.commit()
    worker = Worker(tasks, dsn, environments=["env-a"], concurrency=3, poll_interval=0.1)
    worker.store.claim = _never_claims  # type: ignore[method-assign]
    async with running(worker):
        answer = await as_admin.get("/api/v1/workers")
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        (listed,) = shown["workers"]
        assert listed["id"] == worker.worker_id
        assert (listed["environments"], listed["queues"], listed["concurrency"]) == (
            ["env-a"],
            None,
            3,
        )
        assert "mail" in listed["tasks"]
        assert listed["live"] is True
        assert listed["last_seen_at"] >= listed["started_at"]
        unserved = {(t["environment"], t["task"]) for t in shown["unserved_tasks"]}
        assert unserved == {("env-a", "bill"), ("env-b", "mail")}
        one = (await as_admin.get("/api/v1/workers", params={"limit": 1})).json()
        assert len(one["unserved_tasks"]) == 1
    assert (await as_admin.get("/api/v1/workers")).json()["workers"] == []


async def test_an_environment_key_and_no_key_are_refused(
    as_a: httpx.AsyncClient, http: httpx.AsyncClient
) -> None:
    refused = await as_a.get("/api/v1/workers")
    assert refused.status_code == 403
    assert "workers" not in refused.json()
    assert (await http.get("/api/v1/workers")).status_code == 401


async def _never_claims(*args: Any, **kwargs: Any) -> list[Any]:
    # The registry is about what a worker serves: this one leaves env-a's run of a task it
    # has no handler for QUEUED (a claim that is not task-aware would take it).
    return []
