"""Shutdown: stop claiming, let handlers finish within the grace period, hand the rest back
without burning their attempt. Also for a real worker process on SIGTERM, and recovery of
the runs of a worker process killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry, Worker
from tests.helpers import run_row, run_status, running, speed_up_periodic_jobs, wait_until
from tests.helpers.metrics import labelled, scrape

pytestmark = pytest.mark.anyio

Stop = Callable[[Worker, anyio.abc.TaskGroup], None]


def by_stop(worker: Worker, group: anyio.abc.TaskGroup) -> None:
    worker.stop()


def by_cancel(worker: Worker, group: anyio.abc.TaskGroup) -> None:
    group.cancel_scope.cancel()


STOPS = [pytest.param(by_stop, id="stop"), pytest.param(by_cancel, id="cancel")]


def sleepy_tasks(log: list[str]) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("sleep")
    async def sleep(ctx: RunContext, seconds: float) -> str:
        log.append(f"start {seconds}")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            log.append(f"cancelled {seconds}")
            raise
        log.append(f"end {seconds}")
        return f"slept {seconds}"

    return tasks


def assert_released(db: psycopg.Connection[Any], run_id: int) -> None:
    row = run_row(db, run_id)
    assert row["status"] == RunStatus.QUEUED
    assert row["attempts"] == 0, "a release does not burn the attempt"
    assert row["lease_token"] is None
    assert row["lease_until"] is None
    assert row["worker_id"] is None
    assert row["error"] is None


@pytest.mark.parametrize("stop", STOPS)
async def test_shutdown_lets_short_handlers_finish_and_stops_claiming(
    dsn: str, db: psycopg.Connection[Any], stop: Stop
) -> None:
    log: list[str] = []
    worker = Worker(sleepy_tasks(log), dsn, shutdown_grace=5.0, poll_interval=0.1)
    async with AsyncClient(dsn) as client:
        first = await client.trigger("sleep", 0.5)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                await group.start(worker.run)
                await wait_until(lambda: log == ["start 0.5"], within=5, what="the handler")
                stop(worker, group)
                asked_at = time.monotonic()
                # Triggered after the stop: a stopping worker claims nothing more. (Shielded:
                # with the cancel variant this body is cancelled too.)
                with anyio.CancelScope(shield=True):
                    late = await client.trigger("sleep", 0.0)
        took = time.monotonic() - asked_at
    assert log == ["start 0.5", "end 0.5"]
    assert took < 4.0, "the worker waited for its handler, not for the whole grace period"
    row = run_row(db, first)
    assert row["status"] == RunStatus.COMPLETED
    assert row["result"] == "slept 0.5"
    assert row["attempts"] == 1
    late_row = run_row(db, late)
    assert late_row["status"] == RunStatus.QUEUED
    assert late_row["attempts"] == 0


@pytest.mark.parametrize("stop", STOPS)
async def test_shutdown_releases_what_outlives_the_grace_period(
    dsn: str, db: psycopg.Connection[Any], stop: Stop
) -> None:
    log: list[str] = []
    worker = Worker(sleepy_tasks(log), dsn, shutdown_grace=0.3, poll_interval=0.1)
    async with AsyncClient(dsn) as client:
        short = await client.trigger("sleep", 0.1)
        long = await client.trigger("sleep", 60.0)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                await group.start(worker.run)
                await wait_until(lambda: len(log) == 2, within=5, what="both handlers")
                stop(worker, group)
                asked_at = time.monotonic()
        took = time.monotonic() - asked_at
    assert 0.3 <= took < 3.0
    assert sorted(log) == sorted(["start 0.1", "start 60.0", "end 0.1", "cancelled 60.0"])
    assert run_status(db, short) is RunStatus.COMPLETED
    assert_released(db, long)
    assert worker.stats.released == 1
    assert worker.stats.completed == 1
    assert not worker.held
    found = scrape(worker.metrics.registry)
    for status in ("RELEASED", "COMPLETED"):
        done = {"task": "sleep", "status": status}
        assert labelled(found, "fairlane_runs_finished_total", **done) == 1
        assert labelled(found, "fairlane_run_duration_seconds_count", **done) == 1

    # Released runs are claimable at once, with their attempt still unspent.
    attempts: list[int] = []
    tasks = TaskRegistry()

    @tasks.task("sleep")
    async def quick(ctx: RunContext, seconds: float) -> None:
        attempts.append(ctx.attempt)

    async with running(Worker(tasks, dsn, poll_interval=0.1)):
        await wait_until(lambda: run_status(db, long) is RunStatus.COMPLETED, within=5)
    assert attempts == [1]


async def test_stop_skipping_the_grace_ends_a_grace_period_under_way(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    worker = Worker(sleepy_tasks(log), dsn, shutdown_grace=60.0, poll_interval=0.1)
    async with AsyncClient(dsn) as client:
        long = await client.trigger("sleep", 600.0)
    with caplog.at_level("INFO", logger="fairlane.worker"), anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            await group.start(worker.run)
            await wait_until(lambda: log == ["start 600.0"], within=5, what="the handler")
            worker.stop()
            await wait_until(
                lambda: "(shutdown_grace) to finish" in caplog.text,
                within=5,
                what="the grace period to begin",
            )
            worker.stop(skip_grace=True)
    assert log == ["start 600.0", "cancelled 600.0"]
    assert_released(db, long)
    assert worker.stats.released == 1


# -- real worker processes ---------------------------------------------------------------------

TASK_MODULE = """
    import anyio

    from fairlane import TaskRegistry

    tasks = TaskRegistry()


    @tasks.task("sleep")
    async def sleep(ctx, seconds):
        await anyio.sleep(seconds)
        return f"slept {seconds}"
"""


@pytest.fixture
def start_worker_process(
    tmp_path: Path, dsn: str
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``python -m fairlane.cli worker`` on the test database with a task module from
    ``tmp_path``; processes still alive at the end are killed."""
    module = tmp_path / "shutdown_tasks.py"
    module.write_text(textwrap.dedent(TASK_MODULE))
    package_root = Path(fairlane.__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), str(package_root), os.environ.get("PYTHONPATH", "")]
        ),
    }
    started: list[subprocess.Popen[bytes]] = []

    def start(*options: str) -> subprocess.Popen[bytes]:
        output = (tmp_path / f"worker-{len(started)}.log").open("wb")
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "fairlane.cli", "worker", "shutdown_tasks:tasks"),
                *("--dsn", dsn, "--poll-interval", "0.1", *options),
            ],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        output.close()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def worker_log(tmp_path: Path) -> str:
    return "\n".join(path.read_text() for path in sorted(tmp_path.glob("worker-*.log")))


async def exited(process: subprocess.Popen[bytes], within: float) -> int:
    await wait_until(lambda: process.poll() is not None, within=within, what="the process to exit")
    code = process.poll()
    assert code is not None
    return code


async def test_sigterm_shuts_a_worker_process_down_gracefully(
    dsn: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    start_worker_process: Callable[..., subprocess.Popen[bytes]],
) -> None:
    async with AsyncClient(dsn) as client:
        short = await client.trigger("sleep", 1.0)
        long = await client.trigger("sleep", 60.0)
    process = start_worker_process("--shutdown-grace", "2", "--lease-seconds", "30")
    await wait_until(
        lambda: (
            run_status(db, short) is RunStatus.EXECUTING
            and run_status(db, long) is RunStatus.EXECUTING
        ),
        within=15,
        what="both runs to start",
    )
    process.send_signal(signal.SIGTERM)
    code = await exited(process, within=10)
    output = worker_log(tmp_path)
    assert code == 0, output
    assert "received SIGTERM" in output
    assert run_status(db, short) is RunStatus.COMPLETED, output
    assert run_row(db, short)["result"] == "slept 1.0"
    assert_released(db, long)


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_second_signal_ends_the_grace_period_under_way(
    dsn: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    start_worker_process: Callable[..., subprocess.Popen[bytes]],
    second: signal.Signals,
) -> None:
    async with AsyncClient(dsn) as client:
        long = await client.trigger("sleep", 600.0)
    process = start_worker_process("--shutdown-grace", "60", "--lease-seconds", "30")
    await wait_until(
        lambda: run_status(db, long) is RunStatus.EXECUTING, within=15, what="the run to start"
    )
    process.send_signal(signal.SIGTERM)
    # The grace period is running: the worker said how long it waits for its handler.
    await wait_until(
        lambda: "get up to 60 s (shutdown_grace)" in worker_log(tmp_path),
        within=10,
        what="the grace period to begin",
    )
    process.send_signal(second)
    # Well within the 60 s of grace left: the handler is stopped and its run handed back now.
    code = await exited(process, within=20)
    output = worker_log(tmp_path)
    assert code == 0, output
    assert f"received {second.name}" in output
    assert_released(db, long)


async def test_runs_of_a_killed_worker_process_come_back_after_the_lease(
    dsn: str,
    db: psycopg.Connection[Any],
    start_worker_process: Callable[..., subprocess.Popen[bytes]],
) -> None:
    speed_up_periodic_jobs(db, 0.2)
    async with AsyncClient(dsn) as client:
        run_id = await client.trigger("sleep", 60.0)
    process = start_worker_process("--lease-seconds", "1")
    await wait_until(
        lambda: run_status(db, run_id) is RunStatus.EXECUTING, within=15, what="the run to start"
    )
    dead_worker = run_row(db, run_id)["worker_id"]
    process.send_signal(signal.SIGKILL)
    assert await exited(process, within=5) == -signal.SIGKILL

    tasks = TaskRegistry()
    attempts: list[int] = []

    @tasks.task("sleep")
    async def quick(ctx: RunContext, seconds: float) -> str:
        attempts.append(ctx.attempt)
        return "recovered"

    killed_at = time.monotonic()
    worker = Worker(tasks, dsn, lease_seconds=1.0, poll_interval=0.1, periodic_interval=0.05)
    async with running(worker):
        await wait_until(
            lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=10, what="recovery"
        )
    assert time.monotonic() - killed_at < 5.0
    assert attempts == [2]
    row = run_row(db, run_id)
    assert row["attempts"] == 2
    assert row["result"] == "recovered"
    assert row["worker_id"] == worker.worker_id
    assert row["worker_id"] != dead_worker


async def test_a_worker_logs_one_start_line_with_what_it_serves(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskRegistry()

    @tasks.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    # A password in the URL (trust auth ignores it) must never reach the log.
    with_password = psycopg.conninfo.make_conninfo(dsn, password="secret")
    worker = Worker(tasks, with_password, environments=["acme"])
    with caplog.at_level("INFO", logger="fairlane.worker"):
        async with running(worker):
            pass
    (start,) = [r for r in caplog.records if "started" in r.getMessage()]
    fields = vars(start)
    assert fields["tasks"] == ["echo"]
    assert fields["environments"] == ["acme"]
    assert fields["concurrency"] == 10
    assert fields["schema_revision"]
    assert "secret" not in start.getMessage()
    assert fields["worker_id"] == worker.worker_id
