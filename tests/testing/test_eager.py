"""Eager mode (fairlane.testing.eager): a trigger runs the handler at once, in-process, with the
worker's own decisions (codecs, retries, AbortRun, hooks, max_duration), and no database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg
import pytest

import fairlane
from fairlane import AbortRun, AsyncClient, Backoff, Client, RunContext, RunStatus, TaskRegistry
from fairlane.errors import (
    EagerModeError,
    MaxDurationExceededError,
    RunNotFoundError,
    TriggerOptionError,
    UnknownTaskError,
)
from fairlane.testing import EagerRuns, eager
from fairlane.triggering.debounce import Debounce
from tests.helpers import statuses

pytestmark = pytest.mark.anyio

# A port nothing listens on: a client of it fails on its first statement.
NOWHERE = "postgresql://127.0.0.1:9/nowhere?connect_timeout=2"
# A backoff no test could wait out: eager retries do not wait for it.
FOREVER = Backoff(min_s=3600, max_s=3600)


@dataclass
class Order:
    id: int
    email: str | None = None


@dataclass
class Receipt:
    to: str
    order: int


class Shop:
    """A registry, and what its handlers and hooks saw."""

    def __init__(self) -> None:
        self.tasks = TaskRegistry()
        self.calls: list[tuple[str, int]] = []
        self.hooks: list[tuple[str, str]] = []
        self.threads: set[str] = set()
        tasks = self.tasks

        async def sent(ctx: RunContext, result: Any) -> None:
            self.hooks.append(("success", repr(result)))

        async def failed(ctx: RunContext, error: BaseException) -> None:
            self.hooks.append(("failure", type(error).__name__))

        @tasks.task(queue="mail", on_success=sent, on_failure=failed)
        async def send_receipt(ctx: RunContext, payload: Order) -> Receipt:
            self.calls.append(("send_receipt", ctx.attempt))
            if payload.email is None:
                raise AbortRun("no address", code="NO_EMAIL")
            ctx.set_metadata(step="rendered")
            ctx.metadata.update(step="sent", to=payload.email)
            return Receipt(to=payload.email, order=payload.id)

        @tasks.task(
            max_attempts=4,
            backoff=FOREVER,
            retry_on=ConnectionError,
            on_success=sent,
            on_failure=failed,
        )
        def flaky(ctx: RunContext, payload: dict[str, Any]) -> int:
            self.calls.append(("flaky", ctx.attempt))
            self.threads.add(threading.current_thread().name)
            if ctx.attempt <= payload["fail"]:
                raise ConnectionError(f"attempt {ctx.attempt}")
            if payload.get("then") == "permission":
                raise PermissionError("not retried: not in retry_on")
            return ctx.attempt

        @tasks.task(max_duration=0.2, on_failure=failed)
        async def slow(ctx: RunContext, payload: None) -> None:
            await anyio.sleep(30)

        @tasks.task()
        def notify(ctx: RunContext, payload: int) -> str:
            with Client(NOWHERE) as client:  # fire and forget a child that fails
                send_receipt.trigger(client, Order(payload))
            return "notified"

        self.send_receipt, self.flaky, self.slow = send_receipt, flaky, slow
        self.notify = notify


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def runs(shop: Shop) -> Iterator[EagerRuns]:
    with eager(shop.tasks) as opened:
        yield opened


def test_a_trigger_runs_the_handler_at_once_without_a_database(
    shop: Shop, runs: EagerRuns, db: psycopg.Connection[Any]
) -> None:
    with Client(NOWHERE) as client:
        run_id = shop.send_receipt.trigger(client, Order(7, "a@example.com"), priority=3)
        run = client.get_run(run_id)
        assert client.wait_for_run(run_id) == run
    assert run_id < 0, "eager ids never collide with stored ones"
    assert (run.status, run.task, run.queue, run.priority, run.attempts) == (
        RunStatus.COMPLETED,
        "send_receipt",
        "mail",
        3,
        1,
    )
    assert run.payload == {"id": 7, "email": "a@example.com"}, "stored as JSON, as a trigger does"
    assert run.result == {"to": "a@example.com", "order": 7}
    assert run.metadata == {"step": "sent", "to": "a@example.com"}
    assert shop.hooks == [("success", "Receipt(to='a@example.com', order=7)")]
    # On your own connection (or session) too: nothing is written to it.
    other = fairlane.trigger(db, "send_receipt", {"id": 8, "email": "b@example.com"})
    assert runs.get(other).status is RunStatus.COMPLETED
    assert statuses(db) == {}
    assert [run.id for run in runs] == [run_id, other]
    assert [run.id for run in runs.runs(shop.send_receipt)] == [run_id, other]
    assert len(runs) == 2
    with pytest.raises(RunNotFoundError):
        runs.get(-99)


def test_retries_abort_and_policies_are_the_workers(shop: Shop, runs: EagerRuns) -> None:
    with Client(NOWHERE) as client:
        retried = shop.flaky.trigger(client, {"fail": 2})
        spent = shop.flaky.trigger(client, {"fail": 9})
        refused = shop.flaky.trigger(client, {"fail": 1, "then": "permission"})
        aborted = shop.send_receipt.trigger(client, Order(1))
        invalid = client.trigger("send_receipt", {"id": "not a number"})
    ok = runs.get(retried)
    assert (ok.status, ok.attempts, ok.result) == (RunStatus.COMPLETED, 3, 3)
    assert ok.error is None, "a completed run keeps no error, as the database's"
    failed = runs.get(spent)
    assert (failed.status, failed.attempts, failed.max_attempts) == (RunStatus.FAILED, 4, 4)
    assert runs.get(refused).attempts == 2, "dont retry what retry_on does not name"
    assert runs.get(refused).error["type"] == "builtins.PermissionError"  # type: ignore[index]
    stopped = runs.get(aborted)
    assert (stopped.status, stopped.attempts) == (RunStatus.FAILED, 1)
    assert stopped.error is not None
    assert stopped.error["code"] == "NO_EMAIL"
    bad = runs.get(invalid)
    assert (bad.status, bad.attempts) == (RunStatus.FAILED, 1)
    assert bad.error is not None
    assert bad.error["code"] == "INVALID_PAYLOAD"
    assert shop.hooks == [
        ("success", "3"),
        ("failure", "ConnectionError"),
        ("failure", "PermissionError"),
        ("failure", "AbortRun"),
        ("failure", "PayloadError"),
    ], "hooks after the attempt that ends the run only"
    assert all(name != threading.main_thread().name for name in shop.threads), (
        "sync handlers run in a worker thread, as a worker runs them"
    )


async def test_max_duration_times_the_run_out(shop: Shop, runs: EagerRuns) -> None:
    async with AsyncClient(NOWHERE) as client:
        run_id = await shop.slow.trigger_async(client, None)
        run = await client.wait_for_run(run_id)
    assert (run.status, run.attempts) == (RunStatus.TIMED_OUT, 1)
    assert run.error is not None
    assert run.error["code"] == "MAX_DURATION_EXCEEDED"
    assert shop.hooks == [("failure", MaxDurationExceededError.__name__)]


async def test_async_and_sync_triggers_from_async_code(shop: Shop, runs: EagerRuns) -> None:
    async with AsyncClient(NOWHERE) as client:
        awaited = await client.trigger("flaky", {"fail": 0})
    # A sync trigger inside async code: this thread's loop is busy, the run goes to a thread.
    with Client(NOWHERE) as client:
        blocking = shop.send_receipt.trigger(client, Order(2, "c@example.com"))
    assert runs.get(awaited).status is runs.get(blocking).status is RunStatus.COMPLETED


def test_propagate_raises_the_error_that_ended_the_run(shop: Shop) -> None:
    with eager(shop.tasks, propagate=True) as runs, Client(NOWHERE) as client:
        with pytest.raises(AbortRun, match="no address"):
            shop.send_receipt.trigger(client, Order(3))
        with pytest.raises(ConnectionError):
            shop.flaky.trigger(client, {"fail": 9})
        assert shop.flaky.trigger(client, {"fail": 1}) < 0
        # A child's error does not reach the parent that triggered it: it never does.
        parent = shop.notify.trigger(client, 9)
    assert [(run.task, run.status) for run in runs] == [
        ("send_receipt", RunStatus.FAILED),
        ("flaky", RunStatus.FAILED),
        ("flaky", RunStatus.COMPLETED),
        ("notify", RunStatus.COMPLETED),
        ("send_receipt", RunStatus.FAILED),
    ]
    assert runs.get(parent).result == "notified"


def test_what_eager_mode_refuses(shop: Shop, runs: EagerRuns) -> None:
    with Client(NOWHERE) as client:
        with pytest.raises(UnknownTaskError):
            client.trigger("no_such_task")
        with pytest.raises(EagerModeError, match="debounce"):
            client.trigger("flaky", {"fail": 0}, debounce=Debounce("k", "5s"))
        requests = [
            fairlane.TriggerRequest("flaky", {"fail": 0}),
            fairlane.TriggerRequest("flaky", {"fail": 0}, priority="high"),  # type: ignore[arg-type]
        ]
        with pytest.raises(TriggerOptionError) as refused:
            client.trigger_many(requests)
    assert refused.value.index == 1
    assert len(runs) == 0, "a refused call runs nothing"
    assert shop.calls == []


def test_idempotency_keys_within_the_block(shop: Shop, runs: EagerRuns) -> None:
    with Client(NOWHERE) as client:
        first = client.trigger("flaky", {"fail": 0}, idempotency_key="k1")
        assert client.trigger("flaky", {"fail": 0}, idempotency_key="k1") == first
        failed = client.trigger("flaky", {"fail": 9}, idempotency_key="k2")
        again = client.trigger("flaky", {"fail": 0}, idempotency_key="k2")
    assert again != failed, "a failed run frees its key"
    assert [status for status in (runs.get(r).status for r in (first, failed, again))] == [
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.COMPLETED,
    ]
    assert len(runs) == 3


def test_eager_mode_is_process_wide_and_ends_with_its_block(
    shop: Shop, dsn: str, db: psycopg.Connection[Any]
) -> None:
    made: list[int] = []
    with eager(shop.tasks) as runs:
        thread = threading.Thread(
            target=lambda: made.append(fairlane.trigger(db, "flaky", {"fail": 0}))
        )
        thread.start()
        thread.join()
        assert runs.get(made[0]).status is RunStatus.COMPLETED
        # The schedules' "trigger now" and the worker's own triggers always use the database.
        fairlane.schedules.create(
            db, "flaky", "0 0 * * *", external_id="nightly", payload={"fail": 0}
        )
        scheduled = fairlane.schedules.trigger(db, "nightly")
        assert scheduled > 0
    with Client(dsn) as client:
        stored = client.trigger("flaky", {"fail": 0})
        assert client.get_run(stored).status is RunStatus.QUEUED
    assert statuses(db) == {"QUEUED": 2}
    with Client(dsn) as client, pytest.raises(RunNotFoundError):
        client.get_run(made[0])
