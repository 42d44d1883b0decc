"""A worker's own series, scraped from its endpoint: attempts of two tasks (one failing) by task
and outcome, the claim's round trip, repairs and periodic ticks counted once across workers,
batch items by the state their carriers reached, and ``fairlane worker --metrics-port``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker, trigger
from fairlane.batches import AsyncBatchClient
from fairlane.batches.processing import BatchItemProcessor
from fairlane.maintenance.jobs import JOBS
from fairlane.metrics import serve_worker_metrics
from fairlane.retry import Backoff
from fairlane.worker.lease_store import LeaseStore
from tests.helpers import fast_worker, running, speed_up_periodic_jobs, statuses, wait_until
from tests.helpers.batches import abort_now, batch_done, batch_row, chunked, ndjson, set_setting
from tests.helpers.batches import tasks as echo_tasks
from tests.helpers.faults import closed_port
from tests.helpers.metrics import Samples, labelled, scrape, scrape_endpoint

pytestmark = pytest.mark.anyio

# Each "ok" attempt takes at least this long, so every one lands above the 0.05 s bucket.
OK_SLEEP_S = 0.06


def two_tasks() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("ok")
    async def ok(ctx: RunContext, payload: Any) -> Any:
        await anyio.sleep(OK_SLEEP_S)
        return payload

    @tasks.task("boom", backoff=Backoff(min_s=0, max_s=0))
    def boom(ctx: RunContext, payload: Any) -> None:
        raise ValueError(f"boom {payload}")

    return tasks


async def test_the_endpoint_serves_attempts_by_task_and_outcome(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    speed_up_periodic_jobs(db, 0.05)
    for n in range(3):
        trigger(db, "ok", n)
    for n in range(2):
        trigger(db, "boom", n, max_attempts=2)
    worker = fast_worker(two_tasks(), dsn, worker_id="w-metrics", concurrency=4)
    stats = await worker.run_until_idle()
    assert statuses(db) == {"COMPLETED": 3, "FAILED": 2}
    endpoint = serve_worker_metrics(0, worker.metrics, dsn, host="127.0.0.1")
    try:
        found = await anyio.to_thread.run_sync(scrape_endpoint, endpoint.port)
    finally:
        endpoint.close()

    def attempts(series: str, task: str, status: str, **more: str) -> float:
        return labelled(found, series, task=task, status=status, **more)

    ended = {("ok", "COMPLETED"): 3, ("boom", "RETRIED"): 2, ("boom", "FAILED"): 2}
    for (task, status), count in ended.items():
        assert attempts("fairlane_runs_finished_total", task, status) == count
        assert attempts("fairlane_run_duration_seconds_count", task, status) == count
        assert attempts("fairlane_run_duration_seconds_bucket", task, status, le="+Inf") == count
    finished = {
        (dict(labels)["task"], dict(labels)["status"])
        for name, labels in found
        if name == "fairlane_runs_finished_total"
    }
    assert finished == set(ended)
    assert attempts("fairlane_run_duration_seconds_bucket", "ok", "COMPLETED", le="0.05") == 0
    assert attempts("fairlane_run_duration_seconds_sum", "ok", "COMPLETED") >= 3 * OK_SLEEP_S
    # Every claim that returned was timed; none failed here.
    claims = labelled(found, "fairlane_claims_total")
    assert claims == stats.claims >= 1
    assert labelled(found, "fairlane_claim_duration_seconds_count") == claims
    assert labelled(found, "fairlane_claim_duration_seconds_sum") > 0
    assert labelled(found, "fairlane_worker_info", worker_id="w-metrics") == 1
    # The retries were promoted by this worker's periodic ticks, each observed at most once (a
    # tick still running when the worker stopped is not at all; the test below waits for them).
    ran = dict(db.execute("SELECT name, run_count FROM fairlane.periodic_jobs").fetchall())
    for job, run_count in ran.items():
        assert job_ticks(found, job) <= run_count
    # The database's series come with the worker's.
    assert labelled(found, "fairlane_database_up") == 1
    queued = {"environment": "default", "queue": "default", "status": "QUEUED"}
    assert labelled(found, "fairlane_runs", **queued) == 0


async def test_repairs_and_ticks_are_counted_once_across_workers(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Each periodic tick runs in one worker, which alone observes it and counts its repairs:
    summed over the workers, the series match the database."""
    tasks = TaskRegistry()

    @tasks.task("t")
    async def t(ctx: RunContext, payload: Any) -> None:
        return None

    lost = [trigger(db, "t", n, environment="lost") for n in range(6)]
    # A worker that died holding these runs: their leases lapse.
    dead = LeaseStore("fairlane", lease_seconds=30, worker_id="dead")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert {run.id for run in await dead.claim(conn, 10)} == set(lost)
    db.execute("UPDATE fairlane.runs SET lease_until = now() - interval '1 second'")
    speed_up_periodic_jobs(db, 0.02)
    workers = [fast_worker(tasks, dsn, periodic_interval=0.01) for _ in range(2)]
    async with running(*workers):
        await wait_until(lambda: statuses(db) == {"COMPLETED": 6}, what="the lost runs done")
        # No tick may be cut short by the stop, unobserved: no new tick is started, and the
        # workers' runner calls in flight end first.
        db.execute("UPDATE fairlane.periodic_jobs SET enabled = false")
        await wait_until(lambda: not periodic_calls_running(db), what="the ticks to end")
    found = [scrape(worker.metrics.registry) for worker in workers]
    assert (
        sum(labelled(each, "fairlane_repairs_total", kind="expired_lease") for each in found) == 6
    )
    counts = db.execute("SELECT name, run_count FROM fairlane.periodic_jobs").fetchall()
    assert {job.name for job in JOBS} <= {name for name, _ in counts}
    for name, run_count in counts:
        observed = sum(job_ticks(each, name) for each in found)
        assert observed == run_count, name


def periodic_calls_running(db: psycopg.Connection[Any]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'fairlane periodic' AND state = 'active'"
    ).fetchone()
    return row is not None and row[0] > 0


def job_ticks(found: Samples, job: str) -> float:
    return found.get(("fairlane_periodic_job_duration_seconds_count", (("job", job),)), 0.0)


async def test_batch_items_are_counted_by_the_state_their_carrier_reached(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    set_setting(db, "batch_item_max_bytes", 200)
    items: list[dict[str, Any]] = [
        {"task": "echo", "payload": 0},
        {"task": "echo", "payload": 1, "options": {"no_such_option": 1}},
        {"task": "echo", "payload": 2},
        # Over the size limit: a pre-failed run at ingest, no carrier's.
        {"task": "echo", "payload": "x" * 1000},
    ]
    worker = Worker(echo_tasks(), dsn, poll_interval=0.05)
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 4)
        await batches.ingest(batch.id, chunked(ndjson(items), 1000))
        async with running(worker):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
    assert (batch_row(db, batch.id)["succeeded"], batch_row(db, batch.id)["failed"]) == (2, 2)
    found = scrape(worker.metrics.registry)
    counted = {
        state: labelled(found, "fairlane_batch_items_total", state=state)
        for state in ("TRIGGERED", "FAILED", "SKIPPED")
    }
    assert counted == {"TRIGGERED": 2, "FAILED": 1, "SKIPPED": 0}


async def test_an_item_of_an_aborted_batch_is_counted_skipped_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 2)
        await batches.ingest(batch.id, chunked(ndjson([{"task": "echo", "index": 0}]), 100))
    await anyio.to_thread.run_sync(abort_now, dsn)
    assert batch_row(db, batch.id)["status"] == "ABORTED"
    seen: list[str] = []
    processor = BatchItemProcessor(dsn, "fairlane", on_item=seen.append)
    ctx: Any = type("Ctx", (), {"is_last_attempt": False, "environment": "env"})()
    try:
        first = await processor.process(ctx, {"batch_id": batch.id, "index": 0})
        again = await processor.process(ctx, {"batch_id": batch.id, "index": 0})
    finally:
        await processor.close()
    assert first == {"skipped": "batch aborted"}
    assert again == {"skipped": "item already SKIPPED"}
    assert seen == ["SKIPPED"]


async def test_the_worker_command_serves_its_metrics_port(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    (tmp_path / "metric_tasks.py").write_text(
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
    for n in range(5):
        trigger(db, "square", n)
    port = closed_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [
        sys.executable,
        "-m",
        "fairlane.cli",
        "worker",
        "metric_tasks:tasks",
        "--dsn",
        dsn,
        "--poll-interval",
        "0.1",
        "--metrics-port",
        str(port),
        "--json",
    ]

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    process = await anyio.to_thread.run_sync(start)
    try:

        async def all_squared() -> bool:
            try:
                found = await anyio.to_thread.run_sync(scrape_endpoint, port)
            except OSError:
                return False  # not listening yet
            done = {"task": "square", "status": "COMPLETED"}
            return found.get(("fairlane_runs_finished_total", tuple(sorted(done.items())))) == 5

        await wait_until(all_squared, within=60, interval=0.1, what="5 completions served")
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=60))
    assert process.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["completed"] == 5
