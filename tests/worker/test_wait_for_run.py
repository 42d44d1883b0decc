"""Waiting for a run from outside a handler: ``AsyncClient.wait_for_run`` and
``Client.wait_for_run`` wake on the finished channel (not by polling: every test here sets a
fallback poll far longer than it waits), return the final run, and time out with a typed
error."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, Client, RunContext, RunStatus, TaskRegistry
from fairlane.engine import engine
from fairlane.engine.statement import run
from fairlane.errors import RunNotFoundError, RunWaitTimeoutError
from tests.helpers import fast_worker, running

pytestmark = pytest.mark.anyio

NO_POLL = 60.0  # the fallback poll never happens within a test


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(dsn) as opened:
        yield opened


def _gated(release: dict[int, anyio.Event]) -> TaskRegistry:
    """Task ``gated``: waits until the test releases its payload's gate, returns it doubled."""
    tasks = TaskRegistry()

    @tasks.task()
    async def gated(ctx: RunContext, payload: int) -> int:
        await release.setdefault(payload, anyio.Event()).wait()
        if payload < 0:
            raise ValueError("negative")
        return payload * 2

    return tasks


async def test_wait_for_run_wakes_when_the_run_ends(dsn: str, client: AsyncClient) -> None:
    gates: dict[int, anyio.Event] = {}
    run_id = await client.trigger("gated", 21, max_attempts=1)
    failing = await client.trigger("gated", -1, max_attempts=1)
    async with running(fast_worker(_gated(gates), dsn)):
        got: dict[int, tuple[float, Any]] = {}

        async def waiter(target: int) -> None:
            run = await client.wait_for_run(target, timeout=20, poll_interval=NO_POLL)
            got[target] = (time.monotonic(), run)

        async with anyio.create_task_group() as group:
            group.start_soon(waiter, run_id)
            group.start_soon(waiter, failing)
            await anyio.sleep(0.5)
            assert got == {}, "nothing ended yet"
            released = time.monotonic()
            gates.setdefault(21, anyio.Event()).set()
            gates.setdefault(-1, anyio.Event()).set()
    done_at, done = got[run_id]
    assert done.status is RunStatus.COMPLETED
    assert done.result == 42
    failed_at, failed = got[failing]
    assert failed.status is RunStatus.FAILED
    assert failed.error["message"] == "negative"
    assert max(done_at, failed_at) - released < 5, "woken by the notification, not a poll"


async def test_a_final_run_is_returned_at_once(dsn: str, client: AsyncClient) -> None:
    run_id = await client.trigger("job")
    await client.cancel(run_id)
    started = time.monotonic()
    run = await client.wait_for_run(run_id, timeout=5, poll_interval=NO_POLL)
    assert run.status is RunStatus.CANCELED
    assert time.monotonic() - started < 1


async def test_a_cancel_wakes_the_waiter(client: AsyncClient) -> None:
    run_id = await client.trigger("nobody_runs_this")
    async with anyio.create_task_group() as group:

        async def cancel_soon() -> None:
            await anyio.sleep(0.3)
            await AsyncClient(client.dsn).cancel(run_id)

        group.start_soon(cancel_soon)
        with anyio.fail_after(10):
            run = await client.wait_for_run(run_id, poll_interval=NO_POLL)
    assert run.status is RunStatus.CANCELED


async def test_wait_for_run_times_out_with_a_typed_error(client: AsyncClient) -> None:
    run_id = await client.trigger("nobody_runs_this")
    started = time.monotonic()
    with pytest.raises(RunWaitTimeoutError) as timed_out:
        await client.wait_for_run(run_id, timeout=0.3, poll_interval=NO_POLL)
    assert 0.25 < time.monotonic() - started < 5
    assert isinstance(timed_out.value, TimeoutError)
    assert (timed_out.value.run_id, timed_out.value.status) == (run_id, "QUEUED")
    with pytest.raises(RunNotFoundError):
        await client.wait_for_run(10**12, timeout=1)


async def test_many_waits_share_one_listener(dsn: str, client: AsyncClient) -> None:
    """Ten waits on one client, released one at a time in reverse: the reader hands over as
    its own run ends, and every waiter is woken by its announcement."""
    gates: dict[int, anyio.Event] = {}
    ids = [await client.trigger("gated", n, environment=f"env-{n}") for n in range(10)]
    results: dict[int, int] = {}
    async with running(fast_worker(_gated(gates), dsn, concurrency=10)):
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def waiter(n: int, target: int) -> None:
                    run = await client.wait_for_run(target, poll_interval=NO_POLL)
                    results[n] = run.result

                for n, target in enumerate(ids):
                    group.start_soon(waiter, n, target)
                await anyio.sleep(0.3)
                for n in reversed(range(10)):
                    gates.setdefault(n, anyio.Event()).set()
                    await anyio.sleep(0.05)
    assert results == {n: n * 2 for n in range(10)}


async def test_sync_client_waits_from_threads(dsn: str, client: AsyncClient) -> None:
    gates: dict[int, anyio.Event] = {}
    ids = [await client.trigger("gated", n, environment=f"env-{n}") for n in range(3)]
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    with Client(dsn) as sync_client:

        def waiter(target: int) -> None:
            try:
                results[target] = sync_client.wait_for_run(
                    target, timeout=20, poll_interval=NO_POLL
                )
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=waiter, args=(target,)) for target in ids]
        async with running(fast_worker(_gated(gates), dsn)):
            for thread in threads:
                thread.start()
            await anyio.sleep(0.5)
            released = time.monotonic()
            for n in range(3):
                gates.setdefault(n, anyio.Event()).set()
            for thread in threads:
                await anyio.to_thread.run_sync(thread.join, 20)
        assert time.monotonic() - released < 5
        with pytest.raises(RunWaitTimeoutError):
            sync_client.wait_for_run(sync_client.trigger("nobody"), timeout=0.2)
    assert errors == []
    assert {target: run.result for target, run in results.items()} == {
        target: n * 2 for n, target in enumerate(ids)
    }


def test_sync_clients_reader_stops_when_nobody_waits(dsn: str) -> None:
    """``Client``'s watcher runs ``AsyncRunWatcher`` on an event loop thread: its reader task
    goes with the last wait, a later wait starts another, and ``close`` ends the thread."""
    client = Client(dsn)
    try:
        for _ in range(2):
            with pytest.raises(RunWaitTimeoutError):
                client.wait_for_run(client.trigger("nobody"), timeout=0.2, poll_interval=NO_POLL)
            watcher = client._watcher
            assert watcher is not None
            assert watcher._watcher._reader is None, "a reader outlived its waits"
        assert watcher is not None
        loop = watcher._loop
        assert loop is not None
        assert loop.thread.is_alive()
    finally:
        client.close()
    assert not loop.thread.is_alive()


def test_only_watched_runs_are_announced(db: psycopg.Connection[Any], dsn: str) -> None:
    """The finished channel carries runs somebody waits on, not every run that ends."""
    with psycopg.connect(dsn, autocommit=True) as listener, Client(dsn) as client:
        run(listener, engine("fairlane").listen.finished())
        quiet = client.trigger("job")
        watched = client.trigger("job")
        client._watch(watched)  # what wait_for_run does before it sleeps
        client.cancel(quiet)
        client.cancel(watched)
        listener.execute("SELECT 1")
        payloads = [note.payload for note in listener.notifies(timeout=0.5)]
    assert payloads == [str(watched)]
