"""Waits are keyed by attempt: a parent retried after a failure starts its own waits (new
children, a new batch, a new timer), and a parent replayed after its worker died keeps the
waits of the attempt it replays (tests/worker/test_wait_replay.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, Worker, trigger
from fairlane.triggering.idempotency import stored_key
from tests.helpers import fast_worker, run_row, run_status, running, wait_until
from tests.helpers.wait_attempts import FAST, WAIT_S, registry

pytestmark = pytest.mark.anyio


@pytest.fixture
def fast_db(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Retries (DELAYED) are promoted, and lapsed leases reclaimed, every 50 ms."""
    db.execute("UPDATE fairlane.periodic_jobs SET interval_s = 0.05, next_due_at = now()")
    return db


def children(db: psycopg.Connection[Any], parent: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT payload, status, coalesce(idempotency_key, inactive_idempotency_key)"
        " FROM fairlane.runs"
        " WHERE parent_run_id = %s AND task = 'child' ORDER BY id",
        (parent,),
    ).fetchall()


def edges(db: psycopg.Connection[Any], parent: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT e.attempt, e.position, e.item, w.kind FROM fairlane.run_waitpoints e"
        " JOIN fairlane.waitpoints w ON w.id = e.waitpoint_id"
        " WHERE e.run_id = %s ORDER BY e.attempt, e.position, e.item",
        (parent,),
    ).fetchall()


async def finish(dsn: str, db: psycopg.Connection[Any], *runs: int) -> None:
    async with running(fast_worker(registry(), dsn, concurrency=4)):
        for run in runs:
            await wait_until(lambda run=run: run_status(db, run).is_final, what=f"run {run}")


async def test_a_retried_parent_triggers_a_new_child_for_the_attempt_scope(
    dsn: str, fast_db: psycopg.Connection[Any]
) -> None:
    parent = trigger(fast_db, "keyed_parent", None, max_attempts=3)
    await finish(dsn, fast_db, parent)
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"], row["result"]) == (RunStatus.COMPLETED, 2, [200, 2])
    # One child per attempt, each under the key of its own attempt.
    keys = [stored_key("k", "attempt", parent_run_id=parent, parent_attempt=n) for n in (1, 2)]
    assert children(fast_db, parent) == [(1, "FAILED", keys[0]), (2, "COMPLETED", keys[1])]
    assert [edge[:3] for edge in edges(fast_db, parent)] == [(1, 0, 0), (2, 0, 0)]
    # What it waits on is its last attempt's wait: the second child.
    async with AsyncClient(dsn) as client:
        waits = await client.waits_on(parent)
    second = fast_db.execute(
        "SELECT id FROM fairlane.runs WHERE parent_run_id = %s AND payload = '2'", (parent,)
    ).fetchone()
    assert [(wait.position, wait.run_id) for wait in waits] == [(0, second[0] if second else None)]


async def test_a_retried_parent_triggers_a_new_unkeyed_child(
    dsn: str, fast_db: psycopg.Connection[Any]
) -> None:
    parent = trigger(fast_db, "plain_parent", None, max_attempts=3)
    await finish(dsn, fast_db, parent)
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"], row["result"]) == (RunStatus.COMPLETED, 2, [200, 2])
    assert [child[:2] for child in children(fast_db, parent)] == [(1, "FAILED"), (2, "COMPLETED")]


async def test_a_parent_retried_by_hand_triggers_a_new_child(
    dsn: str, fast_db: psycopg.Connection[Any]
) -> None:
    parent = trigger(fast_db, "plain_parent", None, max_attempts=1)
    await finish(dsn, fast_db, parent)
    assert run_status(fast_db, parent) is RunStatus.FAILED
    async with AsyncClient(dsn) as client:
        await client.retry(parent)
    await finish(dsn, fast_db, parent)
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"], row["result"]) == (RunStatus.COMPLETED, 2, [200, 2])
    assert [child[:2] for child in children(fast_db, parent)] == [(1, "FAILED"), (2, "COMPLETED")]


async def test_a_retried_parent_makes_a_new_batch(
    dsn: str, fast_db: psycopg.Connection[Any]
) -> None:
    parent = trigger(fast_db, "batch_parent", None, max_attempts=3)
    await finish(dsn, fast_db, parent)
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"], row["result"]) == (
        RunStatus.COMPLETED,
        2,
        [1200, 200],
    )
    batches = fast_db.execute(
        "SELECT run_count FROM fairlane.batches WHERE parent_run_id = %s ORDER BY id", (parent,)
    ).fetchall()
    assert batches == [(2,), (2,)]
    assert [(edge[0], edge[2]) for edge in edges(fast_db, parent)] == [
        (1, -1),
        (1, 0),
        (1, 1),
        (2, -1),
        (2, 0),
        (2, 1),
    ]


async def test_a_retried_parent_waits_its_time_again(
    dsn: str, fast_db: psycopg.Connection[Any]
) -> None:
    parent = trigger(fast_db, "sleeping_parent", None, max_attempts=3)
    await finish(dsn, fast_db, parent)
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"]) == (RunStatus.COMPLETED, 2)
    # Attempt 2 made a timer of its own and waited it out, rather than finding attempt 1's due.
    assert row["result"] >= WAIT_S
    assert edges(fast_db, parent) == [(1, 0, 0, "DATETIME"), (2, 0, 0, "DATETIME")]


REPLAY_TASKS = """
from fairlane import RunContext, TaskRegistry
from fairlane.retry import Backoff

tasks = TaskRegistry()


@tasks.task("child")
async def child(ctx: RunContext, payload: int) -> int:
    if payload == 1:
        raise ValueError("the first attempt's child fails")
    return payload * 100


@tasks.task("parent", backoff=Backoff(min_s=0.05, max_s=0.1))
async def parent(ctx: RunContext, payload: object) -> object:
    # Attempt 1's child runs in this worker's queue; attempt 2's waits for the next worker.
    queue = "parents" if ctx.attempt == 1 else "children"
    result = await ctx.trigger_and_wait(
        "child", ctx.attempt, queue=queue, max_attempts=1, idempotency_key="k",
        idempotency_scope="attempt",
    )
    if not result.ok:
        raise RuntimeError("the child failed")
    return [result.output, ctx.attempt, ctx.wait_attempt]
"""


async def test_a_crash_replay_after_a_retry_keeps_the_waits_of_the_attempt_it_replays(
    dsn: str, fast_db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Attempt 1 fails, attempt 2 waits on its child and its worker dies: attempt 3 replays
    attempt 2 and finds its child, rather than attempt 1's or a new one."""
    (tmp_path / "attempt_tasks.py").write_text(textwrap.dedent(REPLAY_TASKS))
    source_root = Path(__file__).resolve().parents[2] / "queue"  # noqa: ASYNC240
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{source_root}"}
    parent = trigger(fast_db, "parent", None, queue="parents", max_attempts=4)
    process = subprocess.Popen(  # noqa: ASYNC220 - a real worker process, to be killed
        [
            sys.executable,
            "-m",
            "fairlane.cli",
            "worker",
            "attempt_tasks:tasks",
            "--dsn",
            dsn,
            "--queue",
            "parents",
            "--lease-seconds",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until(
            lambda: (
                run_row(fast_db, parent)["attempts"] == 2
                and run_status(fast_db, parent) == "WAITING"
            ),
            within=30,
            what="attempt 2 waiting",
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    tasks = registry()

    @tasks.task("parent", backoff=FAST)
    async def parent_handler(ctx: RunContext, payload: object) -> object:
        result = await ctx.trigger_and_wait(
            "child",
            ctx.attempt,
            queue="children",
            max_attempts=1,
            idempotency_key="k",
            idempotency_scope="attempt",
        )
        return [result.output, ctx.attempt, ctx.wait_attempt]

    async with running(Worker(tasks, dsn, concurrency=4, poll_interval=0.1)):
        await wait_until(lambda: run_status(fast_db, parent).is_final, within=30, what="replay")
    row = run_row(fast_db, parent)
    assert (row["status"], row["attempts"], row["result"]) == (RunStatus.COMPLETED, 3, [200, 3, 2])
    assert [child[:2] for child in children(fast_db, parent)] == [(1, "FAILED"), (2, "COMPLETED")]
    assert [edge[:3] for edge in edges(fast_db, parent)] == [(1, 0, 0), (2, 0, 0)]
