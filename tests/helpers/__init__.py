"""Shared test helpers: running a worker in the background, polling until a condition holds."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import anyio
import psycopg
import pytest
from psycopg.rows import dict_row

from fairlane import RunStatus, TaskRegistry, Worker, trigger
from fairlane.engine.sqlfiles import query
from fairlane.models import ClaimedRun
from fairlane.worker.lease_store import Completion, Lease, LeaseStore
from tests.helpers.interleave import Session


@asynccontextmanager
async def running(*workers: Worker) -> AsyncIterator[None]:
    """Run workers for the duration of the block, then stop them gracefully."""
    async with anyio.create_task_group() as group:
        for worker in workers:
            await group.start(worker.run)
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()


def poll(condition: Callable[[], bool], *, within: float, what: str) -> float:
    """Seconds until ``condition`` held, checked every 0.05 s (blocking: for tests that drive
    processes rather than an event loop); fails after ``within``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what}: not within {within:g} s")
        time.sleep(0.05)
    return time.monotonic() - started


async def wait_until(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll ``predicate`` until it is true; fail with ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        outcome = predicate()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await anyio.sleep(interval)


def fast_worker(tasks: TaskRegistry, dsn: str, **options: Any) -> Worker:
    """A worker that polls every 0.1 s and runs periodic jobs every 0.05 s."""
    options.setdefault("poll_interval", 0.1)
    options.setdefault("periodic_interval", 0.05)
    return Worker(tasks, dsn, **options)


def statuses(db: psycopg.Connection[Any], schema: str = "fairlane") -> dict[str, int]:
    rows = db.execute(f"SELECT status, count(*) FROM {schema}.runs GROUP BY status").fetchall()
    return {status: count for status, count in rows}


def run_status(db: psycopg.Connection[Any], run_id: int) -> RunStatus:
    row = db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None, f"run {run_id} does not exist"
    return RunStatus(row[0])


def run_row(db: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    """The whole stored row of a run, as a dict."""
    with db.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute("SELECT * FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None, f"run {run_id} does not exist"
    return row


def speed_up_periodic_jobs(db: psycopg.Connection[Any], interval_s: float = 0.2) -> None:
    """Make lease reclaim and delayed promotion tick every ``interval_s`` (and due now)."""
    db.execute(
        "UPDATE fairlane.periodic_jobs SET interval_s = %s, next_due_at = now()", (interval_s,)
    )


@asynccontextmanager
async def worker_in_thread(worker: Worker) -> AsyncIterator[threading.Thread]:
    """Run ``worker`` on its own event loop in its own thread (so its loop can be stalled
    without stalling the test's), then stop it gracefully and join the thread."""
    failures: list[BaseException] = []

    def target() -> None:
        try:
            anyio.run(worker.run)
        except BaseException as error:  # reported by the context manager
            failures.append(error)

    thread = threading.Thread(target=target, name=f"worker {worker.worker_id}", daemon=True)
    thread.start()
    try:
        assert await anyio.to_thread.run_sync(worker.wait_started, 10.0), "worker did not start"
        yield thread
    finally:
        if thread.is_alive():
            await anyio.to_thread.run_sync(worker.stop)
            await anyio.to_thread.run_sync(thread.join, 30.0)
    assert not thread.is_alive(), "worker thread did not stop"
    if failures:
        raise failures[0]


async def trigger_together(
    dsn: str,
    connections: int,
    trigger_one: Callable[[psycopg.AsyncConnection[Any], int], Awaitable[int]],
) -> list[int]:
    """Open ``connections`` connections, release them at once, and have each call
    ``trigger_one`` in its own transaction held open a moment after triggering, so the
    triggers really contend. Returns the run ids they got."""
    opened = [await psycopg.AsyncConnection.connect(dsn) for _ in range(connections)]
    go = anyio.Event()
    got: list[int] = []

    async def one(conn: psycopg.AsyncConnection[Any], n: int) -> None:
        await go.wait()
        async with conn.transaction():
            got.append(await trigger_one(conn, n))
            await anyio.sleep(0.01)

    try:
        async with anyio.create_task_group() as group:
            for n, conn in enumerate(opened):
                group.start_soon(one, conn, n)
            await anyio.sleep(0.1)
            go.set()
    finally:
        for conn in opened:
            await conn.close()
    return got


async def claim_and_complete(
    conn: psycopg.AsyncConnection[Any], store: LeaseStore, limit: int, **options: Any
) -> list[ClaimedRun]:
    """Claim up to ``limit`` runs (``options`` go to ``LeaseStore.claim``) and complete them."""
    claimed = await store.claim(conn, limit, **options)
    await store.complete(
        conn, [Completion(Lease(run.id, run.lease_token), "null") for run in claimed]
    )
    return claimed


# -- fairlane's SQL by hand: a run claimed and waiting without a worker ----------------------

Conn = psycopg.Connection[Any]


async def log_nested_plans(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """From now on, the plan of every statement ``conn`` runs, nested ones (inside plpgsql
    functions) included, as auto_explain reports it (at NOTICE level, to this client), lands
    in the returned list. Skips the test where the role cannot load auto_explain."""
    try:
        await conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain is not available to this role: {error}")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_level = notice",
        "client_min_messages = notice",
    ):
        await conn.execute(f"SET {setting}")
    plans: list[str] = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    return plans


def claim_params(**given: Any) -> dict[str, Any]:
    """The parameters of the ``claim_runs`` statement, as a worker's full scan sends them
    (no floors), with ``given`` in place of the defaults."""
    params: dict[str, Any] = {
        "limit": 10,
        "lease_s": 30.0,
        "worker_id": "test",
        "environments": None,
        "queues": None,
        "full_scan": True,
        "floor_environments": None,
        "floor_queues": None,
        "floor_orders": None,
        "floor_ids": None,
        "tasks": None,
        "announced": None,
        "last_yield": None,
        "turn_start": None,
    }
    params.update(given)
    return params


def claim(db: Conn, run_id: int) -> UUID:
    """Claim exactly ``run_id`` (its own environment keeps other runs out of the way)."""
    row = db.execute("SELECT environment FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    claimed = db.execute(
        query("claim_runs", "fairlane"), claim_params(limit=1, lease_s=300, environments=[row[0]])
    ).fetchall()
    assert [r[0] for r in claimed] == [run_id]
    return UUID(str(claimed[0][1]))


def executing_run(db: Conn, task: str) -> tuple[int, UUID]:
    run_id = trigger(db, task, environment=f"env-{task}")
    return run_id, claim(db, run_id)


def wait_on_runs(db: Conn, parent: int, token: UUID, children: list[int]) -> str:
    """The wait transaction a worker runs for ``ctx.wait_for_runs(children)``."""
    with db.transaction():
        db.execute(query("lock_awaited_runs", "fairlane"), {"run_ids": children})
        rows = db.execute(query("ensure_run_waitpoints", "fairlane"), {"run_ids": children})
        waitpoints = dict(rows.fetchall())
        insert_edges(db, parent, [waitpoints[child] for child in children])
        state = db.execute(query("begin_waiting", "fairlane"), {"run_id": parent, "token": token})
        row = state.fetchone()
    assert row is not None
    return str(row[0])


def insert_edges(db: Conn | Session, parent: int, waitpoints: list[int]) -> None:
    """Edges of the parent's first attempt (its wait_attempt until a failure is retried)."""
    params = {
        "run_id": parent,
        "attempt": 1,
        "position": 0,
        "items": list(range(len(waitpoints))),
        "waitpoint_ids": waitpoints,
    }
    statement = query("insert_wait_edges", "fairlane")
    if isinstance(db, Session):
        db.run(statement, params)
    else:
        db.execute(statement, params)


def announced(db: psycopg.Connection[Any]) -> list[str]:
    """Environments announced on the runs channel since the last call (LISTEN is on ``db``)."""
    db.execute("SELECT 1")  # notifications are read with the next result
    return sorted(notification.payload for notification in db.notifies(timeout=0.2))
