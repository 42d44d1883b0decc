"""Tags, metadata and machine on every run, listing with filters (point 7), pre-failed runs
(point 8), retrying a failed run, and the ``fairlane runs`` commands."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from fairlane import (
    AsyncClient,
    Client,
    RunContext,
    RunFilter,
    RunStatus,
    TaskRegistry,
    TriggerRequest,
    Worker,
    limits,
)
from fairlane.cli import main
from fairlane.control import PAYLOAD_TOO_LARGE
from fairlane.errors import QueueSizeLimitExceeded, RunFilterError, RunNotRetryableError
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio


async def test_tags_metadata_and_machine_reach_the_handler(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    seen: list[tuple[str | None, dict[str, Any]]] = []

    @tasks.task("render")
    async def render(ctx: RunContext, payload: None) -> None:
        seen.append((ctx.machine, ctx.metadata))

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger(
            "render",
            tags=["video", "tenant:7"],
            metadata={"source": "api", "n": [1, 2]},
            machine="large-1x",
        )
        run = await client.get_run(run_id)
        assert (run.tags, run.metadata, run.machine) == (
            ["video", "tenant:7"],
            {"source": "api", "n": [1, 2]},
            "large-1x",
        )
        async with running(Worker(tasks, dsn, poll_interval=0.1)):
            await wait_until(lambda: bool(seen), what="the handler")
    assert seen == [("large-1x", {"source": "api", "n": [1, 2]})]


async def test_list_runs_by_environment_queue_task_status_and_tag(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        ids = await client.trigger_many(
            [
                TriggerRequest("a", environment="e1", queue="q1", tags=["red"]),
                TriggerRequest("a", environment="e1", queue="q2", tags=["red", "big"]),
                TriggerRequest("b", environment="e1", queue="q1", tags=["blue"]),
                TriggerRequest("a", environment="e2", queue="q1", delay="1h", tags=["red"]),
                TriggerRequest("b", environment="e2", queue="q2"),
            ]
        )

        async def listed(**by: Any) -> list[int]:
            return [run.id for run in await client.list_runs(**by)]

        assert await listed() == ids[::-1]
        assert await listed(environment="e1") == [ids[2], ids[1], ids[0]]
        assert await listed(queue="q2") == [ids[4], ids[1]]
        assert await listed(task="b") == [ids[4], ids[2]]
        assert await listed(status="DELAYED") == [ids[3]]
        assert await listed(status=["DELAYED", "QUEUED"], task="b") == [ids[4], ids[2]]
        assert await listed(tags=["red"]) == [ids[3], ids[1], ids[0]]
        assert await listed(tags=["red", "big"]) == [ids[1]]
        assert await listed(environment="e1", tags=["red"], queue="q1") == [ids[0]]
        assert await listed(limit=2) == [ids[4], ids[3]]
        assert await listed(limit=2, before_id=ids[3]) == [ids[2], ids[1]]
        with Client(dsn) as sync_client:
            sync = sync_client.list_runs(RunFilter(environment="e2", status=RunStatus.QUEUED))
        assert [run.id for run in sync] == [ids[4]]
        with pytest.raises(RunFilterError, match="NOPE"):
            await client.list_runs(status="NOPE")


async def test_pre_failed_run_is_final_at_once(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        parent = await client.trigger("parent", environment="e")
        run_id = await client.create_failed_run(
            "child",
            {"big": "..."},
            code=PAYLOAD_TOO_LARGE,
            message="item 3 is 5 MiB",
            parent_run_id=parent,
            tags=["batch:9"],
            environment="e",
            queue="q",
        )
        run = await client.get_run(run_id)
    with Client(dsn) as sync_client:
        sync_id = sync_client.create_failed_run("child", code="X", message="m")
    assert run.status is RunStatus.SYSTEM_FAILURE
    assert run.status.is_final
    assert run.finished_at is not None
    assert run.error is not None
    assert (run.error["code"], run.error["message"]) == (PAYLOAD_TOO_LARGE, "item 3 is 5 MiB")
    assert (run.parent_run_id, run.tags, run.environment, run.queue, run.attempts) == (
        parent,
        ["batch:9"],
        "e",
        "q",
        0,
    )
    assert run_status(db, sync_id) is RunStatus.SYSTEM_FAILURE
    # Never claimable: a worker finds nothing to do.
    row = db.execute("SELECT count(*) FROM fairlane.claim_runs(10, 30, 'w')").fetchone()
    assert row == (1,), "only the parent is claimable"


async def test_retry_requeues_a_failed_run_with_one_more_attempt(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    calls: list[int] = []

    @tasks.task("flaky")
    async def flaky(ctx: RunContext, payload: None) -> str:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise RuntimeError("first time fails")
        return "ok"

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("flaky", max_attempts=1)
        worker = Worker(tasks, dsn, poll_interval=0.1)
        async with running(worker):
            await wait_until(lambda: run_status(db, run_id) is RunStatus.FAILED, what="failure")
            retried = await client.retry(run_id)
            assert (retried.status, retried.max_attempts, retried.error) in {
                (RunStatus.QUEUED, 2, None),
                (RunStatus.EXECUTING, 2, None),
                (RunStatus.COMPLETED, 2, None),
            }
            await wait_until(lambda: run_status(db, run_id) is RunStatus.COMPLETED, what="retry")
        run = await client.get_run(run_id)
        assert (run.attempts, run.result, calls) == (2, "ok", [1, 2])
        with pytest.raises(RunNotRetryableError) as refused:
            await client.retry(run_id)
        assert refused.value.status == "COMPLETED"


async def test_retry_respects_the_queue_size_limit(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        failed = await client.create_failed_run("t", code="X", message="m", queue="q")
        await client.trigger("t", queue="q")
        limits.set_queue(db, "default", "q", size_limit=1)
        with pytest.raises(QueueSizeLimitExceeded):
            await client.retry(failed)
        limits.set_queue(db, "default", "q", size_limit=2)
        assert (await client.retry(failed)).status is RunStatus.QUEUED


def test_runs_commands(dsn: str, db: psycopg.Connection[Any], capsys: Any) -> None:
    with Client(dsn) as client:
        tagged = client.trigger("a", tags=["x"], environment="e", queue="q")
        client.trigger("b")
        failed = client.create_failed_run("c", code="X", message="m")
    base = ["--dsn", dsn]

    assert main(["runs", "list", "--tag", "x", *base]) == 0
    out = capsys.readouterr().out
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["id", "status", "environment"]
    assert "error" in header
    assert f"{tagged:>10} QUEUED" in out
    assert len(lines) == 1
    assert main(["runs", "list", "--environment", "e", "--queue", "q", "--task", "a", *base]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    # Statuses in any case; a failed run shows its error's first line.
    assert main(["runs", "list", "--status", "queued", "--status", "SYSTEM_FAILURE", *base]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 4
    failed_line = next(line for line in out.splitlines() if f"{failed:>10} SYSTEM_FAILURE" in line)
    assert failed_line.endswith("  m")
    assert main(["runs", "list", "--json", "--task", "c", *base]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["status"]) == (failed, "SYSTEM_FAILURE")

    assert main(["runs", "cancel", str(tagged), *base]) == 0
    assert "canceled (was QUEUED)" in capsys.readouterr().out
    assert main(["runs", "cancel", str(tagged), *base]) == 0
    assert "had already ended CANCELED: nothing to cancel" in capsys.readouterr().out

    assert main(["runs", "retry", str(failed), *base]) == 0
    assert "requeued for attempt 1 of 1" in capsys.readouterr().out
    assert run_status(db, failed) is RunStatus.QUEUED
    assert main(["runs", "retry", str(tagged), *base]) == 2
    assert "only a FAILED" in capsys.readouterr().err

    with Client(dsn) as client:
        delayed = client.trigger("d", delay="1h")
    assert main(["runs", "reschedule", str(delayed), "2h", *base]) == 0
    assert f"run {delayed} starts at" in capsys.readouterr().out
    assert main(["runs", "show", str(delayed), *base, "--json"]) == 0
    assert '"status": "DELAYED"' in capsys.readouterr().out

    assert (
        main(
            [
                "trigger",
                "t",
                "{}",
                "--delay",
                "5m",
                "--tag",
                "a",
                "--tag",
                "b",
                "--metadata",
                '{"k": 1}',
                "--machine",
                "m",
                "--idempotency-key",
                "i",
                *base,
            ]
        )
        == 0
    )
    run_id = int(capsys.readouterr().out)
    row = db.execute(
        "SELECT status, tags, metadata, machine FROM fairlane.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row == ("DELAYED", ["a", "b"], {"k": 1}, "m")
    assert main(["trigger", "t", "--delay", "5 fortnights", *base]) == 2
    assert "'5 fortnights'" in capsys.readouterr().err
