"""Cancel (point 5): QUEUED and DELAYED runs end CANCELED at once; an EXECUTING run's handler
is cancelled through its worker and the run ends CANCELED; cancel reaches descendants; a final
run is left alone and the result says so."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, Client, RunContext, RunStatus, TaskRegistry
from fairlane.errors import RunNotFoundError
from fairlane.models import CancelResult
from fairlane.worker.lease_store import Completion, Lease, LeaseStore
from tests.helpers import fast_worker, run_row, run_status, running, wait_until
from tests.helpers.metrics import scrape

pytestmark = pytest.mark.anyio


async def test_queued_and_delayed_runs_end_canceled_at_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        queued = await client.trigger("t")
        delayed = await client.trigger("t", delay="1h")
        for run_id, was in ((queued, RunStatus.QUEUED), (delayed, RunStatus.DELAYED)):
            result = await client.cancel(run_id)
            assert result == CancelResult(run_id, True, RunStatus.CANCELED, was, 0)
            run = await client.get_run(run_id)
            assert run.status is RunStatus.CANCELED
            assert run.finished_at is not None
            assert run.error is not None
            assert run.error["code"] == "CANCELED"
    # Neither claimable nor promoted later.
    db.execute("UPDATE fairlane.runs SET available_at = now() - interval '1 s'")
    db.execute("SELECT fairlane.promote_delayed_runs()")
    assert db.execute("SELECT count(*) FROM fairlane.claim_runs(10, 30, 'w')").fetchone() == (0,)
    assert run_status(db, delayed) is RunStatus.CANCELED


@pytest.mark.parametrize(
    "final",
    ["COMPLETED", "FAILED", "CRASHED", "TIMED_OUT", "EXPIRED", "CANCELED", "SYSTEM_FAILURE"],
)
async def test_cancelling_a_final_run_is_a_no_op_that_says_so(
    dsn: str, db: psycopg.Connection[Any], final: str
) -> None:
    with Client(dsn) as client:
        run_id = client.trigger("t")
        db.execute(
            "UPDATE fairlane.runs SET status = %s, finished_at = now(), error = '{\"x\": 1}'"
            " WHERE id = %s",
            (final, run_id),
        )
        before = run_row(db, run_id)
        result = client.cancel(run_id)
    assert not result.canceled
    assert result.already_final
    assert result.status is RunStatus(final)
    assert run_row(db, run_id) == before


async def test_cancel_of_a_missing_run(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        with pytest.raises(RunNotFoundError):
            await client.cancel(424242)


async def test_cancel_reaches_descendants(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        root = await client.trigger("root")
        child = await client.trigger("child", parent_run_id=root)
        done_child = await client.trigger("child", parent_run_id=root)
        grandchild = await client.trigger("grandchild", parent_run_id=child, delay="1h")
        # A child that already ended stays as it is, but its own children are still reached.
        db.execute("UPDATE fairlane.runs SET status = 'COMPLETED' WHERE id = %s", (done_child,))
        orphan_of_done = await client.trigger("grandchild", parent_run_id=done_child)
        unrelated = await client.trigger("other")
        sibling_tree = await client.trigger("other", parent_run_id=unrelated)

        result = await client.cancel(root)
    assert (result.canceled, result.descendants_canceled) == (True, 3)
    expected = {
        root: "CANCELED",
        child: "CANCELED",
        grandchild: "CANCELED",
        done_child: "COMPLETED",
        orphan_of_done: "CANCELED",
        unrelated: "QUEUED",
        sibling_tree: "QUEUED",
    }
    assert {run_id: run_status(db, run_id).value for run_id in expected} == expected
    assert run_row(db, grandchild)["error"]["message"] == f"ancestor run {root} was canceled"


async def test_executing_handler_is_cancelled_through_its_worker(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The worker hears the cancel on its channel and cancels the handler at once: well inside
    one heartbeat interval (10 s here), so it is not the heartbeat that stops it."""
    tasks = TaskRegistry()
    started = anyio.Event()
    cancelled = anyio.Event()
    finished: list[int] = []

    @tasks.task("long")
    async def long(ctx: RunContext, payload: None) -> str:
        started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return "too late"

    @tasks.task("short")
    async def short(ctx: RunContext, payload: int) -> int:
        finished.append(payload)
        return payload

    worker = fast_worker(tasks, dsn, lease_seconds=30.0)
    signals = worker.enable_test_signals()
    async with AsyncClient(dsn) as client, running(worker):
        run_id = await client.trigger("long", max_attempts=3)
        with anyio.fail_after(10):
            await started.wait()
        sent = time.monotonic()
        result = await client.cancel(run_id)
        assert (result.canceled, result.previous_status) == (True, RunStatus.EXECUTING)
        with anyio.fail_after(5):
            await cancelled.wait()
        assert time.monotonic() - sent < 5
        row = run_row(db, run_id)
        assert (row["status"], row["lease_token"], row["attempts"]) == ("CANCELED", None, 1)
        # The worker goes on with other work.
        await client.trigger("short", 7)
        await wait_until(lambda: finished == [7], what="the next run")
        await signals.released.wait_for(run_id)
        assert run_id not in worker.held, "forgotten"
    assert signals.canceled.history == [run_id]
    assert worker.stats.canceled == 1
    assert worker.stats.stale_writes == 0
    assert worker.stats.lost_leases == 0
    # The attempt ended CANCELED, with no outcome written for it.
    found = scrape(worker.metrics.registry)
    ended = {
        (dict(labels)["task"], dict(labels)["status"]): value
        for (name, labels), value in found.items()
        if name == "fairlane_runs_finished_total"
    }
    assert ended == {("long", "CANCELED"): 1, ("short", "COMPLETED"): 1}
    assert run_status(db, run_id) is RunStatus.CANCELED, "a cancelled run was retried"
    assert run_row(db, run_id)["result"] is None


async def test_sync_handler_sees_stop_requested(dsn: str, db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()
    started = threading.Event()
    stopped = threading.Event()

    @tasks.task("loop")
    def loop(ctx: RunContext, payload: None) -> None:
        started.set()
        if ctx.stop_requested.wait(30):
            stopped.set()
            assert ctx.stop_reason == "canceled"

    async with AsyncClient(dsn) as client, running(fast_worker(tasks, dsn)):
        run_id = await client.trigger("loop")
        await wait_until(started.is_set, what="the handler to start")
        await client.cancel(run_id)
        await wait_until(stopped.is_set, within=5, what="the handler to see the stop")
    assert run_status(db, run_id) is RunStatus.CANCELED


async def test_without_listen_the_heartbeat_stops_the_handler(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()
    started = anyio.Event()
    cancelled = anyio.Event()

    @tasks.task("long")
    async def long(ctx: RunContext, payload: None) -> None:
        started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    worker = fast_worker(tasks, dsn, listen=False, lease_seconds=1.5)  # beats every 0.5 s
    async with AsyncClient(dsn) as client, running(worker):
        run_id = await client.trigger("long")
        with anyio.fail_after(10):
            await started.wait()
        await client.cancel(run_id)
        with anyio.fail_after(3):
            await cancelled.wait()
    assert run_status(db, run_id) is RunStatus.CANCELED
    assert worker.stats.lost_leases == 1


async def test_the_fence_refuses_the_cancelled_attempts_writes(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="w")
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("t")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            (claimed,) = await store.claim(conn, 1)
            await client.cancel(run_id)
            lease = Lease(run_id, claimed.lease_token)
            assert await store.heartbeat(conn, [lease]) == {run_id}
            assert await store.complete(conn, [Completion(lease, '"late"')]) == set()
    assert (run_status(db, run_id), run_row(db, run_id)["result"]) == (RunStatus.CANCELED, None)
