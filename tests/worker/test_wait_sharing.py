"""Waits shared and cut short: many parents on one child, and cancelling a waiting parent."""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from fairlane import (
    AsyncClient,
    RunContext,
    TaskRegistry,
    TriggerRequest,
    Worker,
    limits,
    trigger,
)
from fairlane.waitpoints import WaitResult
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio


def registry(release: anyio.Event) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("shared")
    async def shared(ctx: RunContext, payload: Any) -> str:
        await release.wait()
        return "built once"

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> Any:
        result: WaitResult = await ctx.trigger_and_wait(
            "shared", None, idempotency_key="report-2026-12", idempotency_scope="global"
        )
        return {"output": result.output, "child": result.run_id}

    @tasks.task("slow_child")
    async def slow_child(ctx: RunContext, payload: Any) -> None:
        await anyio.sleep(60)

    @tasks.task("parent_of_slow")
    async def parent_of_slow(ctx: RunContext, payload: Any) -> None:
        # The first child executes; the others wait in a paused queue.
        await ctx.batch_trigger_and_wait(
            [TriggerRequest("slow_child", i, queue="held" if i else "default") for i in range(3)]
        )

    return tasks


async def test_many_parents_waiting_on_one_child_all_resume(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    release = anyio.Event()
    parents = [trigger(db, "parent", i) for i in range(4)]
    async with running(Worker(registry(release), dsn, concurrency=8)):
        await wait_until(
            lambda: all(run_status(db, p) == "WAITING" for p in parents), what="all waiting"
        )
        children = db.execute("SELECT count(*) FROM fairlane.runs WHERE task = 'shared'")
        assert children.fetchone() == (1,)
        release.set()
        await wait_until(
            lambda: all(run_status(db, p) == "COMPLETED" for p in parents), what="all resumed"
        )
    results = db.execute(
        "SELECT result FROM fairlane.runs WHERE id = ANY(%s)", (parents,)
    ).fetchall()
    assert {row[0]["output"] for row in results} == {"built once"}
    assert len({row[0]["child"] for row in results}) == 1
    assert db.execute("SELECT count(*) FROM fairlane.waitpoints").fetchone() == (1,)


async def test_cancelling_a_waiting_parent_cancels_its_children(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    limits.set_queue(db, "default", "held", paused=True)
    parent = trigger(db, "parent_of_slow", None)
    worker = Worker(registry(anyio.Event()), dsn, concurrency=4)
    async with running(worker), AsyncClient(dsn) as client:
        await wait_until(lambda: run_status(db, parent) == "WAITING", what="waiting")
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM fairlane.runs WHERE task = 'slow_child' "
                    "AND status = 'EXECUTING'"
                ).fetchone()
                == (1,)
            ),
            what="one child executing",
        )
        outcome = await client.cancel(parent)
        assert outcome.canceled
        assert outcome.descendants_canceled == 3
        await wait_until(lambda: worker.stats.canceled >= 2, what="handlers told")
    statuses = db.execute("SELECT task, status FROM fairlane.runs ORDER BY id").fetchall()
    assert statuses == [("parent_of_slow", "CANCELED")] + [("slow_child", "CANCELED")] * 3


async def test_a_parent_waiting_on_a_pre_failed_run_resumes_with_its_error(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("waiter")
    async def waiter(ctx: RunContext, run_id: int) -> Any:
        (result,) = await ctx.wait_for_runs([run_id])
        return {"ok": result.ok, "error": result.error}

    async with AsyncClient(dsn) as client:
        failed = await client.create_failed_run(
            "import", {"row": 7}, code="PAYLOAD_TOO_LARGE", message="item over 3 MiB"
        )
        parent = await client.trigger("waiter", failed)
        async with running(Worker(tasks, dsn)):
            await wait_until(lambda: run_status(db, parent) == "COMPLETED", what="resumed")
    row = db.execute("SELECT result FROM fairlane.runs WHERE id = %s", (parent,)).fetchone()
    assert row is not None
    assert row[0]["ok"] is False
    assert row[0]["error"]["status"] == "SYSTEM_FAILURE"
    assert row[0]["error"]["error"]["code"] == "PAYLOAD_TOO_LARGE"
