"""A worker process that hangs (SIGSTOP) stops refreshing its registry row: the row goes
stale, the periodic job removes it, and the process's runs are no longer served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, TaskRegistry, Worker
from tests.helpers import running, speed_up_periodic_jobs, wait_until

pytestmark = pytest.mark.anyio

TASK_MODULE = """
from fairlane import TaskRegistry

tasks = TaskRegistry()


@tasks.task("hung")
async def hung(ctx, payload):
    return payload
"""


@pytest.fixture
def worker_process(tmp_path: Path, dsn: str) -> Iterator[subprocess.Popen[bytes]]:
    """``fairlane worker`` with a one-second lease, in environment ``stopped`` only."""
    (tmp_path / "registry_tasks.py").write_text(textwrap.dedent(TASK_MODULE))
    package_root = Path(fairlane.__file__).resolve().parent.parent
    path = [str(tmp_path), str(package_root), os.environ.get("PYTHONPATH", "")]
    output = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "fairlane.cli", "worker", "registry_tasks:tasks"),
            *("--dsn", dsn, "--lease-seconds", "1", "--environment", "stopped"),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    output.close()
    try:
        yield process
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait(10)


def statement_running(db: psycopg.Connection[Any]) -> bool:
    """Some other client session of this database is running a statement."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND state = 'active'"
    ).fetchone()
    return bool(row and row[0])


async def test_a_stopped_worker_process_goes_stale_and_is_removed(
    dsn: str, db: psycopg.Connection[Any], worker_process: subprocess.Popen[bytes]
) -> None:
    async with AsyncClient(dsn) as client:

        async def row() -> Any:
            found = [w for w in await client.workers.list() if w.pid == worker_process.pid]
            return found[0] if found else None

        async def registered_live() -> bool:
            found = await row()
            return found is not None and found.live

        await wait_until(registered_live, within=30, what="the worker process to register")
        await client.trigger("hung", {}, environment="other")
        assert [(t.environment, t.task) for t in await client.workers.unserved()] == [
            ("other", "hung")
        ]

        os.kill(worker_process.pid, signal.SIGSTOP)
        # A claim the process sent before it stopped still runs on the server, and its later
        # statements would see a run triggered now: wait for it to end.
        await wait_until(
            lambda: not statement_running(db), within=10, what="the stopped process's claim"
        )
        # Its environment's run waits: the process no longer serves it once its row is stale.
        await client.trigger("hung", {}, environment="stopped")

        async def stale() -> bool:
            found = await row()
            return found is not None and not found.live

        await wait_until(stale, within=30, what="the stopped worker's row to go stale")
        unserved = {(t.environment, t.task) for t in await client.workers.unserved()}
        assert unserved == {("other", "hung"), ("stopped", "hung")}
        speed_up_periodic_jobs(db, 0.05)
        async with running(Worker(TaskRegistry(), dsn, environments=["elsewhere"])):

            async def removed() -> bool:
                return await row() is None

            await wait_until(removed, within=30, what="the stale row to be removed")
