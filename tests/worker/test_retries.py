"""Retries: max_attempts with exponential backoff and jitter, and lapsed leases as attempts."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry, trigger
from fairlane.errors import ConfigurationError, UnknownTaskError
from fairlane.models import ClaimedRun
from fairlane.retry import Backoff
from fairlane.worker.executor import failure_decision
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import (
    fast_worker,
    run_row,
    run_status,
    running,
    speed_up_periodic_jobs,
    wait_until,
)

FAST = Backoff(min_s=0.05, max_s=0.1)

# -- Backoff, as a pure function ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("backoff", "attempts"),
    [
        (Backoff(), 12),
        (Backoff(min_s=0.5, max_s=30.0, factor=3.0), 10),
        (Backoff(min_s=2.0, max_s=2.0), 5),
        (Backoff(min_s=0.05, max_s=0.1), 5),
        (Backoff(min_s=1.0, max_s=1000.0, factor=1.0), 5),
    ],
)
def test_backoff_stays_within_its_exponential_bounds(backoff: Backoff, attempts: int) -> None:
    rng = random.Random(20240601)
    for attempt in range(1, attempts + 1):
        base = backoff.min_s * backoff.factor ** (attempt - 1)
        low, high = min(backoff.max_s, base), min(backoff.max_s, 2 * base)
        for _ in range(200):
            delay = backoff.delay(attempt, rng)
            assert low <= delay <= high, (attempt, delay, low, high)


def test_backoff_grows_exponentially_until_capped() -> None:
    backoff = Backoff(min_s=1.0, max_s=60.0, factor=2.0)
    rng = random.Random(7)
    delays = [backoff.delay(attempt, rng) for attempt in range(1, 11)]
    # Jitter is in [1, 2): each uncapped delay is within its own doubling band.
    for attempt, delay in enumerate(delays[:6], start=1):
        assert 2 ** (attempt - 1) <= delay < 2**attempt
    assert delays[6:] == [60.0] * 4, "capped at max_s from attempt 7 (64 s > 60 s)"


def test_backoff_jitter_is_seeded_and_spread() -> None:
    backoff = Backoff(min_s=1.0, max_s=1000.0)
    first = [backoff.delay(3, random.Random(42)) for _ in range(3)]
    assert first[0] == first[1] == first[2], "the same seed gives the same delay"
    rng = random.Random(42)
    spread = [backoff.delay(3, rng) for _ in range(500)]
    assert len(set(spread)) == len(spread), "runs that failed together do not come back together"
    assert min(spread) < 4.4, "jitter covers [1x, 2x) of the base"
    assert max(spread) > 7.6, "jitter covers [1x, 2x) of the base"
    without_rng = backoff.delay(3)
    assert 4.0 <= without_rng <= 8.0


def test_backoff_rejects_nonsense() -> None:
    for bad in ({"min_s": -1.0}, {"min_s": 5.0, "max_s": 1.0}, {"factor": 0.5}):
        with pytest.raises(ConfigurationError, match="invalid backoff"):
            Backoff(**bad)


# -- end to end --------------------------------------------------------------------------------


@pytest.fixture
def fast_db(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Delayed runs (retry backoff) are promoted every 50 ms."""
    speed_up_periodic_jobs(db, 0.05)
    return db


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(dsn) as opened:
        yield opened


@pytest.mark.anyio
async def test_handler_that_always_fails_ends_failed_after_max_attempts(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    calls: list[int] = []

    @tasks.task("broken", backoff=FAST)
    async def broken(ctx: RunContext, payload: dict[str, int]) -> None:
        calls.append(ctx.attempt)
        raise ValueError(f"attempt {ctx.attempt} of {ctx.max_attempts} failed on {payload['n']}")

    worker = fast_worker(tasks, dsn)
    run_id = await client.trigger("broken", {"n": 7}, max_attempts=3)
    async with running(worker):
        await wait_until(
            lambda: run_status(fast_db, run_id).is_final, within=10, what="the run to end"
        )
    row = run_row(fast_db, run_id)
    assert row["status"] == RunStatus.FAILED
    assert row["attempts"] == 3
    assert calls == [1, 2, 3]
    assert row["finished_at"] is not None
    assert row["lease_token"] is None
    error = row["error"]
    assert error["type"] == "builtins.ValueError"
    assert error["message"] == "attempt 3 of 3 failed on 7"
    assert error["attempt"] == 3
    assert "Traceback (most recent call last)" in error["traceback"]
    assert "in broken" in error["traceback"]
    assert "ValueError: attempt 3 of 3 failed on 7" in error["traceback"]
    assert worker.stats.retried == 2
    assert worker.stats.failed == 1


@pytest.mark.anyio
async def test_retry_waits_for_its_backoff(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    """A failed attempt with retries left goes to DELAYED for its backoff, not straight back."""
    tasks = TaskRegistry()

    @tasks.task("flaky", backoff=Backoff(min_s=30.0, max_s=60.0))
    def flaky(ctx: RunContext, payload: None) -> None:
        raise RuntimeError("try again later")

    run_id = await client.trigger("flaky", max_attempts=2)
    async with running(fast_worker(tasks, dsn)):
        await wait_until(
            lambda: run_status(fast_db, run_id) is RunStatus.DELAYED, within=5, what="DELAYED"
        )
    row = run_row(fast_db, run_id)
    assert row["attempts"] == 1
    assert row["error"]["message"] == "try again later"
    assert row["lease_token"] is None
    waits = fast_db.execute(
        "SELECT extract(epoch FROM available_at - now()) FROM fairlane.runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert waits is not None
    assert 25 <= float(waits[0]) <= 60


@pytest.mark.anyio
async def test_handler_failing_once_then_succeeding_completes_on_attempt_two(
    dsn: str, fast_db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    tasks = TaskRegistry()
    calls: list[int] = []

    @tasks.task("flaky", backoff=FAST)
    async def flaky(ctx: RunContext, payload: None) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("transient")
        return "ok"

    worker = fast_worker(tasks, dsn)
    run_id = await client.trigger("flaky", max_attempts=3)
    async with running(worker):
        await wait_until(
            lambda: run_status(fast_db, run_id).is_final, within=10, what="the run to end"
        )
    row = run_row(fast_db, run_id)
    assert row["status"] == RunStatus.COMPLETED
    assert row["attempts"] == 2
    assert row["result"] == "ok"
    assert row["error"] is None, "a completed run keeps no error of an earlier attempt"
    assert calls == [1, 2]
    assert worker.stats.retried == 1
    assert worker.stats.completed == 1


async def _claim_and_let_lapse(dsn: str, db: psycopg.Connection[Any], run_id: int) -> None:
    """Claim a run like a worker that dies at once: no heartbeat, then the lease lapses and
    the reclaim job runs."""
    store = LeaseStore("fairlane", lease_seconds=0.1, worker_id="doomed")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [claimed] = await store.claim(conn, 1)
    assert claimed.id == run_id
    assert claimed.attempt == 1

    def lapsed() -> bool:
        row = db.execute(
            "SELECT lease_until < now() FROM fairlane.runs WHERE id = %s", (run_id,)
        ).fetchone()
        return bool(row and row[0])

    await wait_until(lapsed, within=5, what="the lease to lapse")
    db.execute("SELECT fairlane.reclaim_expired_leases()")


@pytest.mark.anyio
async def test_lapsed_lease_on_the_last_attempt_crashes_the_run(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    run_id = await client.trigger("job", max_attempts=1)
    await _claim_and_let_lapse(dsn, db, run_id)
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.CRASHED
    assert row["attempts"] == 1
    assert row["finished_at"] is not None
    assert row["lease_token"] is None
    assert row["lease_until"] is None
    assert row["error"]["code"] == "LEASE_EXPIRED"
    assert "doomed" in row["error"]["message"]
    # A final run is never claimed again.
    store = LeaseStore("fairlane", lease_seconds=5, worker_id="other")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await store.claim(conn, 10) == []


@pytest.mark.anyio
async def test_lapsed_lease_counts_as_an_attempt(
    dsn: str, db: psycopg.Connection[Any], client: AsyncClient
) -> None:
    run_id = await client.trigger("job", max_attempts=2)
    await _claim_and_let_lapse(dsn, db, run_id)
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.QUEUED
    assert row["attempts"] == 1
    assert row["lease_token"] is None
    assert row["worker_id"] is None
    assert row["error"]["code"] == "LEASE_EXPIRED"

    tasks = TaskRegistry()
    attempts: list[tuple[int, bool]] = []

    @tasks.task("job")
    async def job(ctx: RunContext, payload: None) -> str:
        attempts.append((ctx.attempt, ctx.is_last_attempt))
        return "second time lucky"

    async with running(fast_worker(tasks, dsn)):
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=5, what="completion"
        )
    assert attempts == [(2, True)]
    row = run_row(db, run_id)
    assert row["attempts"] == 2
    assert row["result"] == "second time lucky"
    assert row["error"] is None, "the lapsed lease's LEASE_EXPIRED is cleared on completion"


@pytest.mark.anyio
async def test_a_run_of_a_task_without_a_handler_waits_queued(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task("handled")
    async def handled(ctx: RunContext, payload: Any) -> None:
        return None

    waiting = trigger(db, "nobody_handles_this", None, max_attempts=1)
    behind = trigger(db, "handled", None)
    # Burst mode stops once a claim over everything it serves finds nothing left.
    await fast_worker(tasks, dsn).run_until_idle()
    assert run_status(db, behind) is RunStatus.COMPLETED
    row = run_row(db, waiting)
    assert (row["status"], row["attempts"], row["error"]) == ("QUEUED", 0, None)


@pytest.mark.parametrize("attempt", [1, 2])
def test_an_unknown_task_that_reaches_the_executor_carries_its_code(attempt: int) -> None:
    # Claims pass over runs without a handler, so only a run claimed for the worker without
    # its task filter gets here: it is failed like any error, with its own code.
    run = ClaimedRun(1, uuid.uuid4(), "gone", None, attempt, 2, "env", "q", {}, None, None)
    status, code, delay = failure_decision(run, UnknownTaskError("gone"), None)
    assert code == "UNKNOWN_TASK"
    assert (status, delay is None) == (
        (RunStatus.DELAYED, False) if attempt == 1 else (RunStatus.FAILED, True)
    )


@pytest.mark.anyio
async def test_each_run_event_is_one_log_line_with_structured_fields(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskRegistry()

    @tasks.task("flaky", backoff=Backoff(min_s=0.01, max_s=0.01))
    async def flaky(ctx: RunContext, payload: Any) -> str:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails\nsecond line not logged")
        return "ok"

    with caplog.at_level("DEBUG", logger="fairlane.worker.runs"):
        async with AsyncClient(dsn) as client, running(fast_worker(tasks, dsn)):
            run_id = await client.trigger("flaky", None, environment="acme", queue="q")
            await wait_until(lambda: run_status(db, run_id) is RunStatus.COMPLETED, what="done")
    events = [vars(r) for r in caplog.records if vars(r).get("run_id") == run_id]
    assert [e["event"] for e in events] == ["started", "retried", "started", "completed"]
    retried, completed = events[1], events[3]
    assert (retried["task"], retried["environment"], retried["queue"]) == ("flaky", "acme", "q")
    assert (retried["attempt"], completed["attempt"]) == (1, 2)
    assert (retried["error_type"], retried["error"]) == ("RuntimeError", "first try fails")
    assert completed["duration_ms"] >= 0
