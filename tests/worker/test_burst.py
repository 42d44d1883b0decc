"""Burst mode: ``Worker.run_until_idle()`` and ``fairlane worker --burst`` drain what is due,
then stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, RunStatus, TaskRegistry, trigger
from fairlane.retry import Backoff
from tests.helpers import fast_worker, run_row, speed_up_periodic_jobs, statuses

pytestmark = pytest.mark.anyio


async def test_run_until_idle_drains_what_is_due_and_stops(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    speed_up_periodic_jobs(db, 0.05)
    tasks = TaskRegistry()

    @tasks.task()
    async def double(ctx: RunContext, payload: int) -> int:
        await anyio.sleep(0.01)
        return payload * 2

    queued = [trigger(db, "double", n, environment=f"env-{n % 3}") for n in range(30)]
    due = [trigger(db, "double", 100 + n, delay=3600) for n in range(5)]
    later = trigger(db, "double", 7, delay=3600)
    # Due an hour early: these wait only for the promotion job, which the worker runs first.
    db.execute(
        "UPDATE fairlane.runs SET available_at = now() - interval '1 second' WHERE id = ANY(%s)",
        (due,),
    )
    worker = fast_worker(tasks, dsn, concurrency=4)
    with anyio.fail_after(30):
        stats = await worker.run_until_idle()
    assert stats is worker.stats
    assert stats.completed == 35
    for run_id in [*queued, *due]:
        assert run_row(db, run_id)["status"] == RunStatus.COMPLETED
    assert run_row(db, later)["status"] == RunStatus.DELAYED, "not due: left alone"
    assert statuses(db) == {"COMPLETED": 35, "DELAYED": 1}


async def test_run_until_idle_waits_for_waiting_handlers_and_their_children(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    tasks = TaskRegistry()

    @tasks.task()
    async def child(ctx: RunContext, payload: int) -> int:
        await anyio.sleep(0.2)
        return payload + 1

    @tasks.task()
    async def parent(ctx: RunContext, payload: int) -> int:
        first = await ctx.trigger_and_wait("child", payload)
        await ctx.wait_until(0.3)
        second = await ctx.trigger_and_wait("child", first.output)
        return int(second.output)

    run_id = trigger(db, "parent", 1)
    with anyio.fail_after(30):
        await fast_worker(tasks, dsn).run_until_idle()
    row = run_row(db, run_id)
    assert (row["status"], row["result"]) == ("COMPLETED", 3)
    assert statuses(db) == {"COMPLETED": 3}


async def test_a_retry_not_due_yet_is_left_delayed(dsn: str, db: psycopg.Connection[Any]) -> None:
    tasks = TaskRegistry()

    @tasks.task(backoff=Backoff(min_s=60, max_s=60))
    async def flaky(ctx: RunContext, payload: None) -> None:
        raise RuntimeError("later")

    run_id = trigger(db, "flaky", max_attempts=3)
    with anyio.fail_after(30):
        stats = await fast_worker(tasks, dsn).run_until_idle()
    assert stats.retried == 1
    row = run_row(db, run_id)
    assert (row["status"], row["attempts"]) == ("DELAYED", 1)


async def test_an_idle_worker_stops_at_once(dsn: str) -> None:
    with anyio.fail_after(10):
        stats = await fast_worker(TaskRegistry(), dsn).run_until_idle()
    assert stats.claimed == 0


def test_cli_worker_burst(dsn: str, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    (tmp_path / "burst_tasks.py").write_text(
        textwrap.dedent(
            """
            from fairlane import RunContext, TaskRegistry

            tasks = TaskRegistry()


            @tasks.task()
            def square(ctx: RunContext, payload: int) -> int:
                return payload * payload
            """
        )
    )
    ids = [trigger(db, "square", n) for n in range(12)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairlane.cli",
            "worker",
            "burst_tasks:tasks",
            "--burst",
            "--json",
            "--dsn",
            dsn,
            "--poll-interval",
            "0.1",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    counters = json.loads(done.stdout.strip().splitlines()[-1])
    assert counters["completed"] == 12
    assert [run_row(db, run_id)["result"] for run_id in ids] == [n * n for n in range(12)]
