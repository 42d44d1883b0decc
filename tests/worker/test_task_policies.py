"""Per-task policies: AbortRun, retry_on / dont_retry_on, trigger defaults through a handle, and
the on_success / on_failure hooks (run before the outcome is written: at least once)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from fairlane import AbortRun, AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.errors import ConfigurationError, TriggerOptionError
from fairlane.retry import Backoff
from tests.helpers import (
    fast_worker,
    run_row,
    run_status,
    running,
    speed_up_periodic_jobs,
    wait_until,
)

pytestmark = pytest.mark.anyio

FAST = Backoff(min_s=0.05, max_s=0.1)


@pytest.fixture
def fast_db(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    speed_up_periodic_jobs(db, 0.05)
    return db


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(dsn) as opened:
        yield opened


async def _until_final(db: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    await wait_until(lambda: run_status(db, run_id).is_final, within=10, what="a final status")
    return run_row(db, run_id)


# -- AbortRun ------------------------------------------------------------------------------


async def test_abort_run_fails_now_without_a_retry(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    attempts: list[int] = []

    @tasks.task(backoff=FAST)
    async def charge(ctx: RunContext, payload: dict[str, Any]) -> None:
        attempts.append(ctx.attempt)
        raise AbortRun("card declined for good", code="CARD_DECLINED")

    worker = fast_worker(tasks, dsn)
    run_id = await charge.trigger_async(client, {"card": 1}, max_attempts=5)
    async with running(worker):
        row = await _until_final(fast_db, run_id)
    assert attempts == [1]
    assert row["status"] == RunStatus.FAILED
    assert row["attempts"] == 1
    assert row["error"]["type"] == "fairlane.errors.AbortRun"
    assert row["error"]["code"] == "CARD_DECLINED"
    assert row["error"]["message"] == "card declined for good"
    assert worker.stats.retried == 0
    assert worker.stats.failed == 1


async def test_abort_run_from_a_sync_handler_has_the_default_code(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()

    @tasks.task(backoff=FAST)
    def give_up(ctx: RunContext, payload: None) -> None:
        raise AbortRun()

    run_id = await give_up.trigger_async(client, None, max_attempts=3)
    async with running(fast_worker(tasks, dsn)):
        row = await _until_final(fast_db, run_id)
    assert (row["status"], row["attempts"], row["error"]["code"]) == ("FAILED", 1, "ABORTED")


# -- retry_on / dont_retry_on ----------------------------------------------------------------


async def test_dont_retry_on_ends_the_run_at_once(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    seen: list[tuple[str, int]] = []

    @tasks.task(backoff=FAST, dont_retry_on=(ValueError, LookupError))
    async def parse(ctx: RunContext, payload: dict[str, str]) -> None:
        seen.append((payload["raise"], ctx.attempt))
        raise {"value": ValueError, "key": KeyError, "runtime": RuntimeError}[payload["raise"]]()

    value = await parse.trigger_async(client, {"raise": "value"}, max_attempts=3)
    key = await parse.trigger_async(client, {"raise": "key"}, max_attempts=3)  # a LookupError
    other = await parse.trigger_async(client, {"raise": "runtime"}, max_attempts=3)
    async with running(fast_worker(tasks, dsn)):
        rows = [await _until_final(fast_db, run_id) for run_id in (value, key, other)]
    assert [(row["status"], row["attempts"]) for row in rows] == [
        ("FAILED", 1),
        ("FAILED", 1),
        ("FAILED", 3),
    ]
    assert sorted(seen) == [
        ("key", 1),
        ("runtime", 1),
        ("runtime", 2),
        ("runtime", 3),
        ("value", 1),
    ]


async def test_retry_on_retries_only_those_exceptions(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()

    @tasks.task(backoff=FAST, retry_on=ConnectionError)
    async def fetch(ctx: RunContext, payload: dict[str, str]) -> str:
        if payload["kind"] == "transient" and ctx.attempt == 1:
            raise ConnectionError("reset by peer")
        if payload["kind"] == "bug":
            raise TypeError("a bug is not retried")
        return f"ok on {ctx.attempt}"

    transient = await fetch.trigger_async(client, {"kind": "transient"}, max_attempts=3)
    bug = await fetch.trigger_async(client, {"kind": "bug"}, max_attempts=3)
    async with running(fast_worker(tasks, dsn)):
        done = await _until_final(fast_db, transient)
        failed = await _until_final(fast_db, bug)
    assert (done["status"], done["result"], done["error"]) == ("COMPLETED", "ok on 2", None)
    assert (failed["status"], failed["attempts"]) == ("FAILED", 1)
    assert failed["error"]["type"] == "builtins.TypeError"


def test_retry_options_take_exception_classes_only() -> None:
    tasks = TaskRegistry()
    with pytest.raises(ConfigurationError, match="exception classes"):

        @tasks.task(retry_on=("ValueError",))  # type: ignore[arg-type]
        async def wrong(ctx: RunContext, payload: None) -> None: ...


# -- defaults through the handle -------------------------------------------------------------


async def test_a_handle_fills_in_the_task_defaults(client: AsyncClient) -> None:
    tasks = TaskRegistry()

    @tasks.task(queue="mail", priority=7, max_attempts=5, max_duration="2m")
    async def send_mail(ctx: RunContext, payload: dict[str, str]) -> None: ...

    defaulted = await client.get_run(await send_mail.trigger_async(client, {"to": "a"}))
    assert (defaulted.task, defaulted.queue, defaulted.priority) == ("send_mail", "mail", 7)
    assert (defaulted.max_attempts, defaulted.max_duration_s) == (5, 120.0)

    given = await client.get_run(
        await send_mail.trigger_async(client, {"to": "b"}, queue="urgent", max_attempts=1)
    )
    assert (given.queue, given.priority, given.max_attempts) == ("urgent", 7, 1)

    # By name, outside the handle, the trigger's own defaults apply.
    by_name = await client.get_run(await client.trigger("send_mail", {"to": "c"}))
    assert (by_name.queue, by_name.priority, by_name.max_attempts) == ("default", 0, 3)
    assert by_name.max_duration_s is None


def test_task_defaults_are_checked_when_registered() -> None:
    tasks = TaskRegistry()
    with pytest.raises(TriggerOptionError) as refused:

        @tasks.task(max_attempts=0)
        async def never(ctx: RunContext, payload: None) -> None: ...

    assert refused.value.option == "max_attempts"
    assert "never" not in tasks


def test_a_handle_triggers_in_the_callers_transaction(db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()

    @tasks.task(queue="tx")
    def noop(ctx: RunContext, payload: int) -> None: ...

    with db.transaction():
        run_id = noop.trigger(db, 5)
    assert run_row(db, run_id)["queue"] == "tx"
    rolled_back: list[int] = []

    def roll_back() -> None:
        with db.transaction():
            rolled_back.append(noop.trigger(db, 6))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        roll_back()
    found = db.execute("SELECT 1 FROM fairlane.runs WHERE id = %s", (rolled_back[0],))
    assert found.fetchone() is None


# -- hooks -----------------------------------------------------------------------------------


async def test_hooks_run_on_success_and_on_the_final_failure_only(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    calls: list[tuple[str, int, Any]] = []
    statuses_seen: list[RunStatus] = []

    async def succeeded(ctx: RunContext, result: Any) -> None:
        # Before the outcome is written: the run still executes.
        statuses_seen.append(run_status(fast_db, ctx.run_id))
        calls.append(("success", ctx.attempt, result))

    def failed(ctx: RunContext, error: BaseException) -> None:  # a sync hook, in a thread
        statuses_seen.append(run_status(fast_db, ctx.run_id))
        calls.append(("failure", ctx.attempt, repr(error)))

    tasks = TaskRegistry()

    @tasks.task(backoff=FAST, on_success=succeeded, on_failure=failed)
    async def job(ctx: RunContext, payload: str) -> dict[str, int] | None:
        if payload == "fail":
            raise RuntimeError(f"attempt {ctx.attempt}")
        return {"n": 1}

    ok = await job.trigger_async(client, "ok")
    bad = await job.trigger_async(client, "fail", max_attempts=2)
    async with running(fast_worker(tasks, dsn)):
        assert (await _until_final(fast_db, ok))["status"] == "COMPLETED"
        assert (await _until_final(fast_db, bad))["status"] == "FAILED"
    assert sorted(calls) == [
        ("failure", 2, "RuntimeError('attempt 2')"),
        ("success", 1, {"n": 1}),
    ]
    assert statuses_seen == [RunStatus.EXECUTING, RunStatus.EXECUTING]


async def test_a_hook_that_raises_leaves_the_outcome_alone(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    called = threading.Event()

    def broken_hook(ctx: RunContext, result: Any) -> None:
        called.set()
        raise ValueError("the hook is broken")

    tasks = TaskRegistry()

    @tasks.task(on_success=broken_hook)
    async def job(ctx: RunContext, payload: None) -> str:
        return "done"

    run_id = await job.trigger_async(client, None)
    async with running(fast_worker(tasks, dsn)):
        row = await _until_final(fast_db, run_id)
    assert called.is_set()
    assert (row["status"], row["result"]) == ("COMPLETED", "done")


async def test_on_failure_runs_for_a_timeout_and_an_abort(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    errors: list[str] = []

    async def record(ctx: RunContext, error: BaseException) -> None:
        errors.append(type(error).__name__)

    tasks = TaskRegistry()

    @tasks.task(on_failure=record, max_duration=0.2)
    async def slow(ctx: RunContext, payload: str) -> None:
        if payload == "abort":
            raise AbortRun("stop")
        import anyio

        await anyio.sleep(5)

    timed_out = await slow.trigger_async(client, "sleep")
    aborted = await slow.trigger_async(client, "abort")
    async with running(fast_worker(tasks, dsn)):
        assert (await _until_final(fast_db, timed_out))["status"] == "TIMED_OUT"
        assert (await _until_final(fast_db, aborted))["status"] == "FAILED"
    assert sorted(errors) == ["AbortRun", "MaxDurationExceededError"]
