"""Many ``wait_for_run`` calls on one client, whichever order their runs end in: every waiter
returns promptly after its run ends, by its announcement (the fallback poll is set far longer
than a test may take, so a waiter nobody reads notifications for shows as late), and the
waits share one LISTEN connection however many start at once."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, Client, RunStatus
from fairlane.errors import RunWaitTimeoutError
from tests.helpers import poll, wait_until

pytestmark = pytest.mark.anyio

NO_POLL = 30.0  # the fallback poll: never within a test
# A waiter returns within this of its run's end (or of its timeout), scheduling noise included.
PROMPT_S = 5.0
CLIENT = "fairlane client"


def awaited(db: psycopg.Connection[Any], ids: list[int]) -> int:
    """How many of the runs a waiter has marked awaited (it registered before that)."""
    row = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND has_waiters", (ids,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def count_connects(monkeypatch: pytest.MonkeyPatch, cls: Any) -> list[int]:
    """Counts the connections opened through ``cls.connect`` (and its subclasses': the pool's
    connection class), each still opened by psycopg itself."""
    opened: list[int] = []
    connect = cls.connect.__func__
    if cls is psycopg.AsyncConnection:

        async def counted_async(klass: Any, *args: Any, **kwargs: Any) -> Any:
            opened.append(1)
            return await connect(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "connect", classmethod(counted_async))
    else:

        def counted(klass: Any, *args: Any, **kwargs: Any) -> Any:
            opened.append(1)
            return connect(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "connect", classmethod(counted))
    return opened


def listeners(db: psycopg.Connection[Any]) -> tuple[int, int]:
    """(LISTEN connections, all connections) of clients on the test's database."""
    row = db.execute(
        "SELECT count(*) FILTER (WHERE query LIKE 'LISTEN%%'), count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s",
        (CLIENT,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@dataclass
class Scenario:
    """The waits of a test and when each should end: ``ends[i]`` is when waiter ``i``'s run
    ended or its timeout passed; ``returned[i]`` when its call returned, with what."""

    targets: list[int]
    timeouts: list[float | None]
    ends: dict[int, float] = field(default_factory=dict)
    returned: dict[int, tuple[float, object]] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)

    def record(self, i: int, outcome: object) -> None:
        self.returned[i] = (time.monotonic(), outcome)

    def late(self) -> dict[int, float]:
        """Waiters that returned more than ``PROMPT_S`` after they should have."""
        late = {}
        for i, timeout in enumerate(self.timeouts):
            due = self.started[i] + timeout if timeout is not None else self.ends[self.targets[i]]
            at, _ = self.returned[i]
            if at - due > PROMPT_S:
                late[i] = round(at - due, 2)
        return late


def mixed(ids: list[int], rng: random.Random) -> tuple[Scenario, list[int]]:
    """200 waits over the runs ``ids`` (175): 100 runs with one waiter each, 25 with two, and
    50 waits with a timeout of 1 to 3 s on runs that never end. Returns the scenario and the
    runs to cancel: in the order their waiters started, shuffled within runs of four (a reader
    leaves as the run of a waiter after it ends)."""
    single, double, never = ids[:100], ids[100:125], ids[125:175]
    targets = single + double + double + never
    timeouts: list[float | None] = [None] * 150 + [rng.uniform(1, 3) for _ in never]
    cancels = single + double
    for start in range(0, len(cancels), 4):
        window = cancels[start : start + 4]
        rng.shuffle(window)
        cancels[start : start + 4] = window
    return Scenario(targets, timeouts), cancels


async def wait_async(client: AsyncClient, scenario: Scenario, i: int) -> None:
    scenario.started[i] = time.monotonic()
    try:
        run = await client.wait_for_run(
            scenario.targets[i], timeout=scenario.timeouts[i], poll_interval=NO_POLL
        )
        scenario.record(i, run.status)
    except RunWaitTimeoutError as timed_out:
        scenario.record(i, timed_out)


def wait_sync(client: Client, scenario: Scenario, i: int) -> None:
    scenario.started[i] = time.monotonic()
    try:
        run = client.wait_for_run(
            scenario.targets[i], timeout=scenario.timeouts[i], poll_interval=NO_POLL
        )
        scenario.record(i, run.status)
    except RunWaitTimeoutError as timed_out:
        scenario.record(i, timed_out)


def assert_prompt(scenario: Scenario) -> None:
    assert len(scenario.returned) == len(scenario.targets), "some waiters never returned"
    for i, (_, outcome) in scenario.returned.items():
        expected = RunWaitTimeoutError if scenario.timeouts[i] is not None else RunStatus
        assert isinstance(outcome, expected), (i, outcome)
    late = scenario.late()
    assert not late, f"{len(late)} of {len(scenario.targets)} waiters late: {late}"


async def cancel_in_turn(canceller: AsyncClient, scenario: Scenario, runs: list[int]) -> None:
    for run_id in runs:
        scenario.ends[run_id] = time.monotonic()
        await canceller.cancel(run_id)


# -- AsyncClient -------------------------------------------------------------------------------


async def test_async_waiters_return_promptly_when_runs_are_cancelled_in_order(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """50 waiters, registered one after the other, their runs cancelled back to back in the
    same order: each reader leaves as its own run ends, and the waiter after it must read."""
    async with AsyncClient(dsn) as client, AsyncClient(dsn) as canceller:
        ids = [await client.trigger("nobody_runs_this") for _ in range(50)]
        scenario = Scenario(ids, [None] * 50)
        with anyio.fail_after(NO_POLL + 30):
            async with anyio.create_task_group() as group:
                for i, run_id in enumerate(ids):
                    group.start_soon(wait_async, client, scenario, i)
                    await wait_until(lambda r=run_id: awaited(db, [r]) == 1, what="registered")
                await cancel_in_turn(canceller, scenario, ids)
    assert_prompt(scenario)


async def test_async_200_mixed_waiters_return_promptly(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client, AsyncClient(dsn) as canceller:
        ids = [await client.trigger("nobody_runs_this") for _ in range(175)]
        scenario, cancels = mixed(ids, random.Random(20240611))
        with anyio.fail_after(NO_POLL + 30):
            async with anyio.create_task_group() as group:
                for i in range(len(scenario.targets)):
                    group.start_soon(wait_async, client, scenario, i)
                await wait_until(lambda: awaited(db, ids) == 175, what="every run awaited")
                await cancel_in_turn(canceller, scenario, cancels)
    assert_prompt(scenario)


async def test_100_async_waits_started_at_once_open_one_listener(
    dsn: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented count: the client's pool (at most 4) and one LISTEN connection, however
    many waits start at once (each opened and never replaced: counted as they are opened)."""
    async with AsyncClient(dsn) as canceller, AsyncClient(dsn) as client:
        ids = [await canceller.trigger("nobody_runs_this") for _ in range(100)]
        opened = count_connects(monkeypatch, psycopg.AsyncConnection)
        scenario = Scenario(ids, [None] * 100)
        with anyio.fail_after(NO_POLL + 30):
            async with anyio.create_task_group() as group:
                for i in range(100):
                    group.start_soon(wait_async, client, scenario, i)
                await wait_until(lambda: awaited(db, ids) == 100, what="every run awaited")
                listening, connections = listeners(db)
                await cancel_in_turn(canceller, scenario, ids)
    # The canceller's one connection counts among the clients'.
    assert listening == 1, listening
    assert connections - 1 <= 5, connections
    assert len(opened) <= 5
    assert_prompt(scenario)


# -- Client, from threads ----------------------------------------------------------------------


def run_threads(
    client: Client, scenario: Scenario, ready: Callable[[int], None], cancel: Callable[[], None]
) -> None:
    """A thread per waiter, started in order (``ready(i)`` returns once waiter ``i`` may be
    counted on), then ``cancel``; every thread must end."""
    threads = []
    for i in range(len(scenario.targets)):
        thread = threading.Thread(target=wait_sync, args=(client, scenario, i), daemon=True)
        threads.append(thread)
        thread.start()
        ready(i)
    cancel()
    for thread in threads:
        thread.join(NO_POLL + 30)
        assert not thread.is_alive(), "a waiter never returned"


def cancel_in_turn_sync(canceller: Client, scenario: Scenario, runs: list[int]) -> None:
    for run_id in runs:
        scenario.ends[run_id] = time.monotonic()
        canceller.cancel(run_id)


def test_sync_waiters_return_promptly_when_runs_are_cancelled_in_order(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    with Client(dsn) as client, Client(dsn) as canceller:
        ids = [client.trigger("nobody_runs_this") for _ in range(50)]
        scenario = Scenario(ids, [None] * 50)

        def registered(i: int) -> None:
            poll(lambda: awaited(db, [ids[i]]) == 1, within=10, what="registered")

        def cancel() -> None:
            cancel_in_turn_sync(canceller, scenario, ids)

        run_threads(client, scenario, registered, cancel)
    assert_prompt(scenario)


def test_sync_200_mixed_waiters_return_promptly(dsn: str, db: psycopg.Connection[Any]) -> None:
    with Client(dsn) as client, Client(dsn) as canceller:
        ids = [client.trigger("nobody_runs_this") for _ in range(175)]
        scenario, cancels = mixed(ids, random.Random(20240612))

        def cancel() -> None:
            poll(lambda: awaited(db, ids) == 175, within=30, what="every run awaited")
            cancel_in_turn_sync(canceller, scenario, cancels)

        run_threads(client, scenario, lambda i: None, cancel)
    assert_prompt(scenario)


def test_100_sync_waits_started_at_once_open_one_listener(
    dsn: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(dsn) as canceller, Client(dsn) as client:
        ids = [canceller.trigger("nobody_runs_this") for _ in range(100)]
        opened = count_connects(monkeypatch, psycopg.Connection)
        scenario = Scenario(ids, [None] * 100)
        counted: list[tuple[int, int]] = []

        def cancel() -> None:
            poll(lambda: awaited(db, ids) == 100, within=30, what="every run awaited")
            counted.append(listeners(db))
            cancel_in_turn_sync(canceller, scenario, ids)

        run_threads(client, scenario, lambda i: None, cancel)
    listening, connections = counted[0]
    assert listening == 1, listening
    assert connections - 1 <= 5, connections
    assert len(opened) <= 5
    assert_prompt(scenario)
