"""A run followed to completion over Server-Sent Events through a real ``fairlane serve``
process: its status changes, the metadata its handler sets, its result."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker
from fairlane.web.keys import create_key
from tests.helpers import running
from tests.helpers.serve import Served, serve
from tests.helpers.sse import events, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def served(dsn: str) -> Iterator[Served]:
    with serve(dsn) as server:
        yield server


async def test_a_run_is_followed_to_completion(
    served: Served, dsn: str, db: psycopg.Connection[Any]
) -> None:
    key = create_key(db, "env-a", name="a")[1]
    tasks = TaskRegistry()
    reported, release = anyio.Event(), anyio.Event()

    @tasks.task("report")
    async def report(ctx: RunContext, payload: Any) -> Any:
        ctx.set_metadata(step="fetched", rows=payload["rows"])
        reported.set()
        await release.wait()
        return {"rows": payload["rows"], "ok": True}

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as http:
        made = await http.post("/api/v1/tasks/report/trigger", json={"payload": {"rows": 3}})
        run_id = made.json()["id"]
        async with http.stream("GET", f"/api/v1/runs/{run_id}/events") as response:
            assert response.status_code == 200
            seen = events(response)
            first = await until(seen, "run")
            assert (first.data["id"], first.data["status"]) == (run_id, "QUEUED")
            worker = Worker(tasks, dsn, environments=["env-a"], poll_interval=0.05)
            async with running(worker):
                executing = await until(seen, "status")
                assert executing.data["status"] == "EXECUTING"
                metadata = await until(seen, "metadata", id=run_id)
                assert metadata.data["metadata"] == {"step": "fetched", "rows": 3}
                assert reported.is_set()
                release.set()
                completed = await until(seen, "status")
                assert (completed.data["status"], completed.data["result"]) == (
                    "COMPLETED",
                    {"rows": 3, "ok": True},
                )
                result = await until(seen, "result")
                assert result.data == {
                    "id": run_id,
                    "status": "COMPLETED",
                    "result": {"rows": 3, "ok": True},
                    "error": None,
                }
                assert (await until(seen, "end")).data == {"reason": "final"}
                assert [event.name async for event in seen] == []


async def test_open_streams_do_not_hold_a_shutdown(dsn: str, db: psycopg.Connection[Any]) -> None:
    key = create_key(db, "env-a", name="a")[1]
    headers = {"Authorization": f"Bearer {key}"}
    with serve(dsn, "--shutdown-timeout", "1") as server:
        http = httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30)
        async with http, http.stream("GET", "/api/v1/tags/forever/events") as response:
            assert response.status_code == 200  # open: it waits for runs that never come
            server.process.terminate()
            # uvicorn ends by raising the signal it caught again, as the default action would.
            code = await anyio.to_thread.run_sync(lambda: server.process.wait(timeout=15))
            assert code in (0, -signal.SIGTERM)
