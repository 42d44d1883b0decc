"""The pytest plugin, tested as a user's project uses it: a sample project written into a
folder of its own (tasks, a conftest.py with ``pytest_plugins = ["fairlane.testing"]``, an ini
file naming the server and the tasks, tests using every fixture) and pytest run on it in a
subprocess, against this suite's PostgreSQL server. One of its tests fails on purpose: a run
that did not complete fails the test that asserts it did, and the plugin still drops its
databases."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[2]

TASKS = """
from dataclasses import dataclass

from fairlane import AbortRun, Backoff, RunContext, TaskRegistry

tasks = TaskRegistry()


@dataclass
class Order:
    id: int
    total_cents: int


@tasks.task(queue="billing")
def charge(ctx: RunContext, payload: Order) -> dict:
    if payload.total_cents <= 0:
        raise AbortRun("nothing to charge", code="EMPTY")
    ctx.metadata.update(charged=payload.total_cents)
    return {"order": payload.id, "charged": payload.total_cents}


@tasks.task(max_attempts=3, backoff=Backoff(min_s=3600, max_s=3600))
def flaky(ctx: RunContext, payload: None) -> None:
    raise ConnectionError(f"down on attempt {ctx.attempt}")


@tasks.task()
async def checkout(ctx: RunContext, payload: Order) -> str:
    receipt = await charge.trigger_and_wait(ctx, payload)
    return f"order {receipt['order']} charged {receipt['charged']}"
"""

CONFTEST = """
import pytest

pytest_plugins = ["fairlane.testing"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
"""

TESTS = """
import pytest

from fairlane import Client, RunStatus
from shop.tasks import Order, charge, checkout

NOWHERE = "postgresql://127.0.0.1:9/nowhere?connect_timeout=2"


def test_trigger_then_drain(fairlane_client, fairlane_worker):
    run_id = charge.trigger(fairlane_client, Order(1, 500))
    stats = fairlane_worker.drain()
    run = fairlane_client.get_run(run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.result == {"order": 1, "charged": 500}
    assert run.metadata == {"charged": 500}
    assert stats.completed == 1


def test_a_drain_can_run_the_delayed_retries_too(fairlane_client, fairlane_worker):
    from shop.tasks import flaky, tasks

    run_id = flaky.trigger(fairlane_client, None)
    fairlane_worker.drain(tasks)  # the registry given in code
    first = fairlane_client.get_run(run_id)
    assert (first.status, first.attempts) == (RunStatus.DELAYED, 1)  # an hour's backoff
    stats = fairlane_worker.drain(tasks, include_delayed=True)
    run = fairlane_client.get_run(run_id)
    assert (run.status, run.attempts) == (RunStatus.FAILED, 3)
    assert [e.error["message"] for e in run.attempt_errors] == [
        f"down on attempt {n}" for n in (1, 2, 3)
    ]
    assert (stats.retried, stats.failed) == (1, 1)


def test_every_test_has_a_fresh_database(fairlane_client):
    assert fairlane_client.count_by_status() == {}


@pytest.mark.anyio
async def test_a_parent_waits_for_its_child(fairlane_async_client, fairlane_worker):
    run_id = await checkout.trigger_async(fairlane_async_client, Order(2, 700))
    await fairlane_worker.drain_async()
    run = await fairlane_async_client.wait_for_run(run_id, timeout=10)
    assert run.status is RunStatus.COMPLETED
    assert run.result == "order 2 charged 700"


def test_eager_mode_needs_no_database(fairlane_eager):
    runs = fairlane_eager()
    with Client(NOWHERE) as client:
        done = checkout.trigger(client, Order(3, 100))
        aborted = charge.trigger(client, Order(4, 0))
        assert client.get_run(done).result == "order 3 charged 100"
    assert runs.get(aborted).status is RunStatus.FAILED
    assert runs.get(aborted).error["code"] == "EMPTY"
    assert [run.task for run in runs] == ["checkout", "charge", "charge"]


def test_a_run_that_failed_fails_the_test(fairlane_client, fairlane_worker):
    run_id = charge.trigger(fairlane_client, Order(5, 0))
    fairlane_worker.drain()
    run = fairlane_client.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, f"deliberately failing: {run.error['code']}"
"""


def _write_project(folder: Path, server_url: str) -> None:
    (folder / "shop").mkdir()
    (folder / "shop" / "__init__.py").write_text("")
    (folder / "shop" / "tasks.py").write_text(textwrap.dedent(TASKS))
    (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (folder / "test_shop.py").write_text(textwrap.dedent(TESTS))
    (folder / "pytest.ini").write_text(
        f"[pytest]\nfairlane_database_url = {server_url}\nfairlane_tasks = shop.tasks:tasks\n"
    )


def _outcome(output: str) -> dict[str, int]:
    """pytest's summary line ("4 passed, 1 failed in 3.2s") as counts."""
    summary = output.strip().splitlines()[-1]
    return {kind: int(count) for count, kind in re.findall(r"(\d+) (\w+)", summary)}


def test_a_sample_project_uses_the_plugin(tmp_path: Path, postgresql_server: Any) -> None:
    server_url = make_conninfo(
        host=postgresql_server.host,
        port=postgresql_server.port,
        user=postgresql_server.user,
        password=postgresql_server.password or None,
        dbname="postgres",
    )
    project = tmp_path / "sample"
    project.mkdir()
    _write_project(project, server_url)
    ignored = {"DATABASE_URL", "TEST_DATABASE_URL", "PYTEST_ADDOPTS", "FAIRLANE_SCHEMA"}
    env = {key: value for key, value in os.environ.items() if key not in ignored}
    env["PYTHONPATH"] = str(ROOT / "queue")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-q",
            "-rf",
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=100)
    finally:
        process.kill()
    assert _outcome(output) == {"passed": 5, "failed": 1}, output
    assert "FAILED test_shop.py::test_a_run_that_failed_fails_the_test" in output, output
    assert "deliberately failing: EMPTY" in output, output

    # The session's template and every test's copy are gone.
    with psycopg.connect(server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"fairlane_test_{process.pid}_%",),
        ).fetchall()
    assert left == []
