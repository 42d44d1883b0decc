"""A batch reports how its runs ended, not only whether its items became runs: 10 of 30 runs
FAILED is a FAILED batch with 20 succeeded and 10 failed runs, in Python, the API, the CLI and
on its page, which links to its runs; the runs list filters by batch; the carriers that made
the runs count in no figure of the tenant's and are hidden unless asked for."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry
from fairlane.cli import main
from tests.helpers import running, wait_until
from tests.helpers.batches import chunked, ndjson, worker
from tests.web.conftest import Keys, bearer

pytestmark = pytest.mark.anyio


def _tasks() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("check")
    async def check(ctx: RunContext, payload: int) -> int:
        if payload % 3 == 0:
            raise ValueError(f"item {payload} is bad")
        return payload

    return tasks


async def _a_finished_batch(dsn: str) -> int:
    async with AsyncClient(dsn) as client:
        batch = await client.batches.create("env-a", run_count=30)
        items = ndjson(
            [{"task": "check", "payload": n, "options": {"max_attempts": 1}} for n in range(30)]
        )
        await client.batches.ingest(batch.id, chunked(items, 4096))
        async with running(worker(dsn, _tasks())):
            await wait_until(
                lambda: _ended(dsn, batch.id), within=60, what="every run of the batch ended"
            )
        return batch.id


async def _ended(dsn: str, batch_id: int) -> bool:
    async with AsyncClient(dsn) as client:
        return (await client.batches.get(batch_id)).runs.ended


async def test_a_batch_with_failed_runs_reports_them_everywhere(
    dsn: str,
    db: psycopg.Connection[Any],
    http: httpx.AsyncClient,
    keys: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    batch_id = await _a_finished_batch(dsn)

    async with AsyncClient(dsn) as client:
        batch = await client.batches.get(batch_id)
        assert (batch.status, batch.succeeded, batch.failed) == ("COMPLETED", 30, 0)  # items
        assert batch.outcome == "FAILED"
        assert (batch.runs.succeeded, batch.runs.failed, batch.runs.not_yet_runs) == (20, 10, 0)
        failed = await client.list_runs(batch_id=batch_id, status="FAILED", limit=100)
        assert sorted(run.payload for run in failed) == list(range(0, 30, 3))

    answer = (await http.get(f"/api/v1/batches/{batch_id}", headers=bearer(keys.a))).json()
    assert answer["outcome"] == "FAILED"
    assert answer["runs"]["failed"] == 10
    assert answer["runs"]["succeeded"] == 20
    page = await http.get(f"/api/v1/runs?batch_id={batch_id}&limit=500", headers=bearer(keys.a))
    assert len(page.json()["data"]) == 30
    # Another environment's key sees none of them, as if the batch did not exist.
    other = await http.get(f"/api/v1/runs?batch_id={batch_id}", headers=bearer(keys.b))
    assert other.json()["data"] == []

    # The command runs its own event loop: in a thread of its own, as from a shell.
    assert await anyio.to_thread.run_sync(main, ["batch", "show", str(batch_id), "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["outcome"] == "FAILED"
    assert shown["runs"]["failed"] == 10
    listing = ["runs", "list", "--batch", str(batch_id), "--limit", "100", "--dsn", dsn]
    assert await anyio.to_thread.run_sync(main, listing) == 0
    listed = [line for line in capsys.readouterr().out.splitlines()[1:] if line.strip()]
    assert len(listed) == 30

    form = await http.get("/login")
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    await http.post("/login", data={"csrf": csrf, "key": keys.admin, "next": "/batches"})
    shown_page = (await http.get(f"/batches/{batch_id}")).text
    assert "FAILED" in shown_page
    assert f"/runs?batch={batch_id}&amp;status=FAILED" in shown_page
    runs_page = (await http.get(f"/runs?batch={batch_id}&status=FAILED")).text
    assert runs_page.count('class="status s-failed"') == 10


async def test_carriers_count_in_no_figure_of_the_tenant(
    dsn: str, db: psycopg.Connection[Any], http: httpx.AsyncClient, keys: Keys
) -> None:
    await _a_finished_batch(dsn)
    async with AsyncClient(dsn) as client:
        queues = {row["queue"] for row in await client.limits.table()}
        assert "__batches__" not in queues
        assert "__batches__" in {
            row["queue"] for row in await client.limits.table(include_carriers=True)
        }
    assert db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE queue = '__batches__' AND finished_at IS NOT NULL"
    ).fetchone() == (30,)

    form = await http.get("/login")
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    await http.post("/login", data={"csrf": csrf, "key": keys.admin, "next": "/"})
    overview = (await http.get("/")).text
    assert "__batches__" not in overview
    # 20 of the tenant's runs completed and 10 failed; the 30 carriers are not among them.
    assert "20 ok" in overview
    assert "10 not ok" in overview
