"""300 parents wait on 5 children each, in 2 worker processes; the 1,500 children are released
together by a barrier, so siblings finish at the same moment in different processes and
batches. Every parent must be woken by the completions alone: the sweeper's repair of missed
wake-ups is switched off, and a waiting worker only ever reads the ready flag that completions
set. Run with `make stress` (CI runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, maintenance, trigger_many
from tests.helpers import poll

pytestmark = [pytest.mark.stress, pytest.mark.timeout(600)]

PARENTS = 300
CHILDREN = 5
# Two processes of at most 8 connections each (batch carriers share 2), and the test's own:
# within the 20 connections a test may hold.
WORKERS = 2
TASKS = """
import os

import anyio

from fairlane import RunContext, TaskRegistry, TriggerRequest

tasks = TaskRegistry()


@tasks.task("storm.parent")
async def parent(ctx: RunContext, payload: dict) -> int:
    children = [TriggerRequest("storm.child", payload, queue="children") for _ in range(5)]
    results = await ctx.batch_trigger_and_wait(children)
    assert all(result.ok for result in results), results
    return sum(result.output for result in results)


@tasks.task("storm.child")
async def child(ctx: RunContext, payload: dict) -> int:
    while not os.path.exists(payload["barrier"]):
        await anyio.sleep(0.01)
    return 1
"""


def count(db: psycopg.Connection[Any], sql: str, *params: Any) -> int:
    row = db.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    (tmp_path / "storm_tasks.py").write_text(textwrap.dedent(TASKS))
    source = Path(__file__).resolve().parents[2] / "queue"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{source}"}
    started = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fairlane.cli",
                "worker",
                "storm_tasks:tasks",
                "--dsn",
                dsn,
                "--concurrency",
                "800",
                "--claim-batch",
                "100",
                "--lease-seconds",
                "60",
                "--poll-interval",
                "5",
                "--batch-connections",
                "2",
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(WORKERS)
    ]
    yield started
    for process in started:
        process.terminate()
    for process in started:
        process.wait(timeout=60)


def test_every_parent_of_a_released_storm_of_children_completes(
    db: psycopg.Connection[Any], workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    maintenance.set_setting(db, "sweep_repair_waiting", False)
    # Every child runs at once, waiting for the barrier: the environment the trigger creates
    # takes no default cap (environment_concurrency_limit).
    maintenance.set_setting(db, "environment_concurrency_limit", None)
    # 1,500 items in 300 batches at once: past the default batch token bucket (1,200).
    maintenance.set_setting(db, "batch_bucket_max", PARENTS * CHILDREN)
    barrier = tmp_path / "release"
    requests = [TriggerRequest("storm.parent", {"barrier": str(barrier)}) for _ in range(PARENTS)]
    parents = trigger_many(db, requests)
    executing_children = (
        "SELECT count(*) FROM fairlane.runs WHERE task = 'storm.child' AND status = 'EXECUTING'"
    )
    poll(
        lambda: count(db, executing_children) == PARENTS * CHILDREN,
        within=120,
        what="all children running",
    )
    waiting = count(db, "SELECT count(*) FROM fairlane.runs WHERE status = 'WAITING'")
    assert waiting == PARENTS

    barrier.touch()
    completed = "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND status = 'COMPLETED'"
    took = poll(
        lambda: count(db, completed, parents) == PARENTS, within=30, what="every parent completed"
    )

    results = db.execute("SELECT DISTINCT result FROM fairlane.runs WHERE id = ANY(%s)", (parents,))
    assert results.fetchall() == [(CHILDREN,)]
    assert all(process.poll() is None for process in workers)
    row = db.execute("SELECT fairlane.repair_waiting_runs()").fetchone()
    assert row == (0,)
    print(
        f"\n{PARENTS} parents x {CHILDREN} children, {WORKERS} workers: all parents "
        f"completed {took:.2f} s after the release; 0 repairs"
    )
