"""Each failed attempt's error, over the API and on the run page."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, TaskRegistry
from tests.web.conftest import Keys, bearer
from tests.worker.test_attempt_errors import FAST, finish_run

pytestmark = pytest.mark.anyio


async def test_the_api_and_the_run_page_show_every_attempt(
    dsn: str, db: psycopg.Connection[Any], http: httpx.AsyncClient, keys: Keys
) -> None:
    tasks = TaskRegistry()

    @tasks.task("flaky", backoff=FAST)
    async def flaky(ctx: RunContext, payload: None) -> None:
        raise RuntimeError(f"no luck on attempt {ctx.attempt}")

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("flaky", max_attempts=3, environment="env-a")
        await finish_run(dsn, db, tasks, run_id)

    answer = await http.get(f"/api/v1/runs/{run_id}", headers=bearer(keys.a))
    assert answer.status_code == 200
    body = answer.json()
    assert [e["attempt"] for e in body["attempt_errors"]] == [1, 2, 3]
    assert body["attempt_errors"][1]["error"]["message"] == "no luck on attempt 2"
    assert body["earlier_attempt_errors"] == 0

    form = await http.get("/login")
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    await http.post("/login", data={"csrf": csrf, "key": keys.admin, "next": "/runs"})
    page = await http.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "attempt 1 failed" in page.text
    assert "no luck on attempt 1" in page.text
    assert "attempt 2 failed" in page.text
    # The last attempt's failure is the run's own end, shown once as such.
    assert "attempt 3 failed" not in page.text
    assert "no luck on attempt 3" in page.text


async def test_a_runs_return_value_is_its_result_over_the_api_and_on_its_page(
    dsn: str, db: psycopg.Connection[Any], http: httpx.AsyncClient, keys: Keys
) -> None:
    """`result`, as in Python and the CLI; `output`, its earlier name, kept for a release."""
    tasks = TaskRegistry()

    @tasks.task("answer")
    async def answer(ctx: RunContext, payload: None) -> dict[str, int]:
        return {"answer": 42}

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("answer", environment="env-a")
        await finish_run(dsn, db, tasks, run_id)

    body = (await http.get(f"/api/v1/runs/{run_id}", headers=bearer(keys.a))).json()
    assert body["result"] == {"answer": 42}
    assert body["output"] == body["result"]

    form = await http.get("/login")
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    await http.post("/login", data={"csrf": csrf, "key": keys.admin, "next": "/runs"})
    page = (await http.get(f"/runs/{run_id}")).text
    assert "<h2>Result</h2>" in page
    assert "<h2>Output</h2>" not in page
