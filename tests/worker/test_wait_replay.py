"""Replay safety: a parent whose worker dies while it waits is re-executed from the start and
finds the same children instead of triggering new ones."""

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

from fairlane import RunContext, TaskRegistry, Worker, trigger
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio

TASKS = """
from fairlane import RunContext, TaskRegistry

tasks = TaskRegistry()


@tasks.task("parent")
async def parent(ctx: RunContext, payload: object) -> object:
    first = await ctx.trigger_and_wait("child", 1, queue="children")
    second = await ctx.trigger_and_wait("child", 2, queue="children")
    return [first.output, second.output, ctx.attempt]
"""


def replay_registry() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: object) -> object:
        first = await ctx.trigger_and_wait("child", 1, queue="children")
        second = await ctx.trigger_and_wait("child", 2, queue="children")
        return [first.output, second.output, ctx.attempt]

    @tasks.task("child")
    async def child(ctx: RunContext, payload: int) -> int:
        return payload * 100

    return tasks


async def test_a_parent_killed_while_waiting_finds_its_children_again(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    (tmp_path / "replay_tasks.py").write_text(textwrap.dedent(TASKS))
    source_root = Path(__file__).resolve().parents[2] / "queue"  # noqa: ASYNC240
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{source_root}"}
    parent = trigger(db, "parent", None, queue="parents")
    # This worker takes parents only, so the child waits until it is dead.
    process = subprocess.Popen(  # noqa: ASYNC220 - a real worker process, to be killed
        [
            sys.executable,
            "-m",
            "fairlane.cli",
            "worker",
            "replay_tasks:tasks",
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
        await wait_until(lambda: run_status(db, parent) == "WAITING", within=30, what="waiting")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    children = "SELECT count(*) FROM fairlane.runs WHERE task = 'child'"
    assert db.execute(children).fetchone() == (1,)

    async with running(Worker(replay_registry(), dsn, concurrency=4)):
        await wait_until(lambda: run_status(db, parent) == "COMPLETED", within=30, what="replay")
    row = db.execute(
        "SELECT result, attempts FROM fairlane.runs WHERE id = %s", (parent,)
    ).fetchone()
    assert row == ([100, 200, 2], 2)
    # Re-execution found the first child by its call position; only the second was new.
    assert db.execute(children).fetchone() == (2,)
    statuses = db.execute(
        "SELECT status, count(*) FROM fairlane.runs WHERE task = 'child' GROUP BY status"
    ).fetchall()
    assert statuses == [("COMPLETED", 2)]
