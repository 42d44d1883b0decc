"""Every failed attempt's error is kept (the last ten in full, the count of the older ones) and
shown by `Client.get_run`, `fairlane runs show`, the API and the run page; the writers that end
an attempt with an error (the worker's failure, the lease reclaim, the concurrency sweeper) all
append to it."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.cli import main
from fairlane.models import KEPT_ATTEMPT_ERRORS
from fairlane.retry import Backoff
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import fast_worker, run_status, running, speed_up_periodic_jobs, wait_until

pytestmark = pytest.mark.anyio

FAST = Backoff(min_s=0.01, max_s=0.02)


async def finish_run(
    dsn: str, db: psycopg.Connection[Any], tasks: TaskRegistry, run_id: int
) -> None:
    speed_up_periodic_jobs(db, 0.05)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(lambda: run_status(db, run_id).is_final, within=30, what="the run's end")


async def test_each_failed_attempt_keeps_its_error_after_the_run_completes(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("flaky", backoff=FAST)
    async def flaky(ctx: RunContext, payload: None) -> str:
        if ctx.attempt < 3:
            raise ConnectionError(f"broken on attempt {ctx.attempt}")
        return "third time lucky"

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("flaky", max_attempts=3)
        await finish_run(dsn, db, tasks, run_id)
        run = await client.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.error is None, "the last attempt succeeded"
    assert [(e.attempt, e.error["message"]) for e in run.attempt_errors] == [
        (1, "broken on attempt 1"),
        (2, "broken on attempt 2"),
    ]
    assert run.attempt_errors[0].failed_at <= run.attempt_errors[1].failed_at
    assert "ConnectionError: broken on attempt 1" in run.attempt_errors[0].error["traceback"]
    assert run.earlier_attempt_errors == 0

    assert main(["runs", "show", str(run_id), "--dsn", dsn, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [e["error"]["message"] for e in shown["attempt_errors"]] == [
        "broken on attempt 1",
        "broken on attempt 2",
    ]
    # Without --json: the state first, then each kept attempt's error on a line of its own.
    assert main(["runs", "show", str(run_id), "--dsn", dsn]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"run {run_id}  ")
    assert lines[0].endswith("COMPLETED")
    errors = [line for line in lines if line.startswith("  attempt ")]
    assert len(errors) == 2
    assert errors[0].endswith("ConnectionError: broken on attempt 1")
    assert errors[1].endswith("ConnectionError: broken on attempt 2")


async def test_a_run_failing_many_times_keeps_the_last_ten_and_counts_the_rest(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("broken", backoff=FAST)
    async def broken(ctx: RunContext, payload: None) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("broken", max_attempts=13)
        await finish_run(dsn, db, tasks, run_id)
        run = await client.get_run(run_id)
    assert run.status is RunStatus.FAILED
    assert len(run.attempt_errors) == KEPT_ATTEMPT_ERRORS
    assert [e.attempt for e in run.attempt_errors] == list(range(4, 14))
    assert [e.error["message"] for e in run.attempt_errors][-1] == "attempt 13"
    assert run.error is not None
    assert run.error["message"] == "attempt 13"
    assert run.earlier_attempt_errors == 3


async def test_a_lapsed_lease_and_a_reconciled_slot_are_failed_attempts(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("job", max_attempts=5)
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="doomed")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [claimed] = await store.claim(conn, 1)
    assert claimed.id == run_id
    db.execute(
        "UPDATE fairlane.runs SET lease_until = now() - interval '1 s' WHERE id = %s", (run_id,)
    )
    db.execute("SELECT fairlane.reclaim_expired_leases()")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [claimed] = await store.claim(conn, 1)
    # A slot held with no lease behind it: the sweeper returns it.
    db.execute("UPDATE fairlane.runs SET lease_token = NULL WHERE id = %s", (run_id,))
    db.execute("SELECT fairlane.sweep_concurrency()")
    async with AsyncClient(dsn) as client:
        run = await client.get_run(run_id)
    assert run.status is RunStatus.QUEUED
    assert [(e.attempt, e.error["code"]) for e in run.attempt_errors] == [
        (1, "LEASE_EXPIRED"),
        (2, "SLOT_RECONCILED"),
    ]
    assert "doomed" in run.attempt_errors[0].error["message"]


async def test_the_history_function_keeps_a_bounded_window(db: psycopg.Connection[Any]) -> None:
    history = None
    for attempt in range(1, 26):
        row = db.execute(
            "SELECT fairlane.with_attempt_error(%s::jsonb, %s, %s::jsonb)",
            (
                json.dumps(history) if history is not None else None,
                attempt,
                json.dumps({"message": f"m{attempt}"}),
            ),
        ).fetchone()
        assert row is not None
        history = row[0]
        kept = history["attempts"]
        assert len(kept) == min(attempt, KEPT_ATTEMPT_ERRORS)
        assert kept[-1]["attempt"] == attempt
        assert history["earlier"] == max(attempt - KEPT_ATTEMPT_ERRORS, 0)
