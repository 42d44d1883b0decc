"""The workers registry: a worker's row from start to stop, its heartbeat, the job that
removes the rows of workers that are gone, and the tasks with queued runs no worker serves."""

from __future__ import annotations

import os
from typing import Any

import anyio
import psycopg
import pytest

import fairlane
from fairlane import AsyncClient, RunContext, TaskRegistry, Worker
from fairlane.models import WorkerInfo
from fairlane.worker.presence import fairlane_version
from tests.helpers import running, speed_up_periodic_jobs, wait_until

pytestmark = pytest.mark.anyio


def registry_of(*names: str) -> TaskRegistry:
    tasks = TaskRegistry()
    for name in names:

        async def handler(ctx: RunContext, payload: Any) -> Any:
            return payload

        tasks.task(name)(handler)
    return tasks


async def listed(client: AsyncClient) -> dict[str, WorkerInfo]:
    return {worker.id: worker for worker in await client.workers.list()}


async def test_a_worker_registers_what_it_serves_and_leaves_at_a_clean_stop(dsn: str) -> None:
    worker = Worker(
        registry_of("mail", "bill"),
        dsn,
        concurrency=7,
        environments=["acme"],
        queues=["fast"],
        poll_interval=0.1,
    )
    async with AsyncClient(dsn) as client:
        async with running(worker):
            found = (await listed(client))[worker.worker_id]
            assert {"mail", "bill"} <= set(found.tasks)
            assert found.environments == ["acme"]
            assert found.queues is not None
            assert "fast" in found.queues
            assert found.concurrency == 7
            assert found.version == fairlane_version() != ""
            assert found.pid == os.getpid()
            assert found.live
            assert not found.stopping
        assert worker.worker_id not in await listed(client)


async def test_an_unrestricted_worker_registers_null_environments_and_queues(dsn: str) -> None:
    worker = Worker(registry_of("mail"), dsn, poll_interval=0.1)
    async with AsyncClient(dsn) as client, running(worker):
        found = (await listed(client))[worker.worker_id]
        assert found.environments is None
        assert found.queues is None


async def test_the_heartbeat_tick_advances_last_seen(dsn: str) -> None:
    worker = Worker(registry_of("mail"), dsn, lease_seconds=0.6, poll_interval=0.1)
    async with AsyncClient(dsn) as client, running(worker):
        first = (await listed(client))[worker.worker_id].last_seen_at

        async def advanced() -> bool:
            return (await listed(client))[worker.worker_id].last_seen_at > first

        await wait_until(advanced, within=10, what="last_seen_at to advance")
        assert worker.presence.ticks >= 2


async def test_a_pruned_row_is_registered_again_at_the_next_tick(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    worker = Worker(registry_of("mail"), dsn, lease_seconds=0.6, poll_interval=0.1)
    async with AsyncClient(dsn) as client, running(worker):
        db.execute("DELETE FROM fairlane.workers")

        async def back() -> bool:
            return worker.worker_id in await listed(client)

        await wait_until(back, within=10, what="the worker to register again")


async def test_the_job_removes_a_row_not_seen_within_its_bound(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    insert = (
        "INSERT INTO fairlane.workers (id, host, pid, version, tasks, concurrency,"
        " stale_after_s, last_seen_at)"
        " VALUES (%s, 'h', 1, 'v', '{mail}', 1, 30, now() - %s::interval)"
    )
    db.execute(insert, ("gone", "31 seconds"))
    db.execute(insert, ("recent", "29 seconds"))
    async with AsyncClient(dsn) as client:
        before = await listed(client)
        assert not before["gone"].live
        assert before["recent"].live
        speed_up_periodic_jobs(db, 0.05)
        async with running(Worker(registry_of("mail"), dsn, periodic_interval=0.05)):

            async def pruned() -> bool:
                return "gone" not in await listed(client)

            await wait_until(pruned, within=10, what="the dead row to be pruned")
            assert "recent" in await listed(client)
    result = db.execute(
        "SELECT last_result FROM fairlane.periodic_jobs WHERE name = 'prune_dead_workers'"
    ).fetchone()
    assert result is not None
    assert result[0] is not None
    assert "pruned" in result[0]


async def test_unserved_tasks_show_until_a_worker_serving_them_registers(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        await client.trigger("report", {}, environment="acme", queue="slow")
        await client.trigger("mail", {}, environment="acme")
        unserved = await client.workers.unserved()
        assert {(t.environment, t.task) for t in unserved} == {("acme", "report"), ("acme", "mail")}
        report = next(t for t in unserved if t.task == "report")
        assert report.queues == ["slow"]
        assert report.runs == 1

        # A worker of another environment, and one of another queue, serve neither run.
        elsewhere = Worker(
            registry_of("report"), dsn, environments=["other"], run_periodic_jobs=False
        )
        other_queue = Worker(registry_of("report"), dsn, queues=["fast"], run_periodic_jobs=False)
        for worker in (elsewhere, other_queue):
            worker.store.claim = _never_claims  # type: ignore[method-assign]
        async with running(elsewhere, other_queue):
            tasks = {t.task for t in await client.workers.unserved()}
            assert tasks == {"report", "mail"}
        serving = Worker(registry_of("report"), dsn, queues=["slow"], run_periodic_jobs=False)
        serving.store.claim = _never_claims  # type: ignore[method-assign]
        async with running(serving):
            assert {t.task for t in await client.workers.unserved()} == {"mail"}
        assert {t.task for t in await client.workers.unserved()} == {"report", "mail"}


async def _never_claims(*args: Any, **kwargs: Any) -> list[Any]:
    # The view is about what workers serve, not what they ran: these workers leave the runs
    # QUEUED (a worker that is not task-aware would claim a run it has no handler for).
    return []


def test_the_sync_client_lists_workers(dsn: str) -> None:
    with fairlane.Client(dsn) as client:
        assert client.workers.list() == []
        assert client.workers.unserved(limit=1) == []


async def test_a_stopping_worker_says_so_and_serves_nothing_more(dsn: str) -> None:
    tasks = TaskRegistry()
    release = anyio.Event()

    @tasks.task("hold")
    async def hold(ctx: RunContext, payload: Any) -> None:
        await release.wait()

    worker = Worker(tasks, dsn, lease_seconds=0.6, poll_interval=0.1, shutdown_grace=60)
    signals = worker.enable_test_signals()
    async with AsyncClient(dsn) as client:
        async with running(worker):
            await client.trigger("hold", {})
            await signals.started.next()
            worker.stop()

            async def stopping() -> bool:
                return (await listed(client))[worker.worker_id].stopping

            await wait_until(stopping, within=10, what="the row to say the worker is stopping")
            await client.trigger("hold", {})
            assert [t.task for t in await client.workers.unserved()] == ["hold"]
            release.set()
        assert worker.worker_id not in await listed(client)
