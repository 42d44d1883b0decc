"""A worker against hung and dropped connections: its connections carry their timeouts and
keepalives as connection options, a hung heartbeat cannot keep a handler running past its
lease (so two executions never overlap), and a hung heartbeat connection is replaced before
the leases lapse."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import AsyncClient, RunContext, RunStatus, TaskRegistry
from fairlane.worker.connections import LoopConnection
from fairlane.worker.heartbeat import Heartbeater
from fairlane.worker.lease_store import Lease, LeaseStore
from fairlane.worker.run_state import ActiveRun, RunState
from fairlane.worker.runs import RunTable
from tests.helpers import (
    fast_worker,
    run_row,
    run_status,
    running,
    speed_up_periodic_jobs,
    wait_until,
)
from tests.helpers.faults import can_signal_backends, stopped

pytestmark = pytest.mark.anyio

PACKAGE = Path(__file__).resolve().parents[2] / "queue" / "fairlane"
SQL = Path(__file__).resolve().parents[2] / "sql"


@pytest.fixture
def signals(db: psycopg.Connection[Any]) -> None:
    if not can_signal_backends(db):
        pytest.skip("needs to SIGSTOP the server's backends (same host, as root or postgres)")


async def trigger(dsn: str, task: str, payload: Any = None, **options: Any) -> int:
    async with AsyncClient(dsn) as client:
        return await client.trigger(task, payload, **options)


async def show(conn: psycopg.AsyncConnection[Any], name: str) -> str:
    cursor = await conn.execute(f"SHOW {name}")
    row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


def test_no_session_level_set_in_the_package() -> None:
    """A session SET leaks to other clients through a transaction-pooling PgBouncer: settings
    go in connection options, or SET LOCAL inside a transaction."""
    session_set = re.compile(r"""execute\(\s*[rfb]?["']\s*SET\s+(?!LOCAL\b)""", re.IGNORECASE)
    found = [
        f"{path.relative_to(PACKAGE)}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        for line in path.read_text().splitlines()
        if session_set.search(line)
    ]
    assert not found, found


def test_no_session_level_setting_in_the_sql() -> None:
    """The SQL files change no setting beyond their transaction: every ``SET`` is an UPDATE's,
    a function's own (``CREATE FUNCTION ... SET``) or ``SET LOCAL``; ``set_config`` is always
    transaction-local; nothing RESETs or DISCARDs."""
    found: list[str] = []
    for path in SQL.rglob("*.sql"):
        text = re.sub(r"--[^\n]*", "", path.read_text())
        for match in re.finditer(r"\bSET\s+(?!LOCAL\b)", text, re.IGNORECASE):
            # The statement (or PL/pgSQL step) the SET is part of, up to it.
            start = max(text.rfind(mark, 0, match.start()) for mark in (";", "$$", "BEGIN"))
            if not re.search(
                r"\b(UPDATE|FUNCTION|PROCEDURE)\b", text[max(start, 0) : match.start()]
            ):
                found.append(
                    f"{path.relative_to(SQL)}: {text[match.start() : match.start() + 50]!r}"
                )
        for match in re.finditer(r"set_config\(((?:[^()]|\([^()]*\))*)\)", text):
            if not re.search(r",\s*true\s*$", match.group(1)):
                found.append(f"{path.relative_to(SQL)}: {match.group()!r}")
        found += [
            f"{path.relative_to(SQL)}: {word}"
            for word in re.findall(r"\b(?:RESET|DISCARD)\b", text)
        ]
    assert not found, found


@pytest.mark.parametrize("durable_claims", [True, False])
async def test_worker_connections_carry_timeouts_and_keepalives(
    dsn: str, durable_claims: bool
) -> None:
    """Every loop's connection is bounded and kept alive. Every commit waits for the WAL flush
    unless claims are asked to be fast: then the claim connection's alone does not."""
    tasks = TaskRegistry()
    held = anyio.Event()

    @tasks.task("hold")
    async def hold(ctx: RunContext, payload: None) -> None:
        held.set()
        await anyio.sleep(1.5)

    worker = fast_worker(
        tasks,
        dsn,
        lease_seconds=3,
        heartbeat_interval=0.2,
        statement_timeout=12,
        heartbeat_timeout=2,
        durable_claims=durable_claims,
    )
    await trigger(dsn, "hold")
    async with running(worker):
        await held.wait()
        await wait_until(
            lambda: all(
                worker.connections[name].current is not None
                for name in ("claim", "heartbeat", "writer", "listener", "periodic")
            ),
            within=10,
            what="every loop to connect",
        )
        seen: dict[str, tuple[str, ...]] = {}
        for name in ("claim", "heartbeat", "writer", "listener", "periodic"):
            conn = worker.connections[name].current
            assert conn is not None
            parameters = conn.info.get_parameters()
            assert parameters.get("keepalives_idle") == "15", parameters
            assert parameters.get("connect_timeout") == "5", parameters
            if name == "listener":
                # Its connection is busy receiving notifications: its parameters say it all.
                assert parameters.get("options") == "-c statement_timeout=12000", parameters
                continue
            seen[name] = (
                await show(conn, "statement_timeout"),
                await show(conn, "synchronous_commit"),
                await show(conn, "application_name"),
                await show(conn, "plan_cache_mode"),
            )
    claims = "on" if durable_claims else "off"
    assert seen == {
        "claim": ("12s", claims, "fairlane claim", "auto"),
        "heartbeat": ("2s", "on", "fairlane heartbeat", "force_generic_plan"),
        "writer": ("12s", "on", "fairlane writer", "force_generic_plan"),
        "periodic": ("12s", "on", "fairlane periodic", "auto"),
    }


@pytest.mark.usefixtures("signals")
async def test_hung_heartbeat_cannot_keep_a_handler_past_its_lease(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The heartbeat connection's backend is stopped, and the beat would wait 30 s for it: the
    lease deadline still cancels the handler on time, and only then can another worker
    re-claim the run. The two executions never overlap."""
    speed_up_periodic_jobs(db, 0.1)
    lease = 2.0
    # (worker, attempt, start, end) of every execution.
    executions: list[list[Any]] = []
    tasks = TaskRegistry()

    @tasks.task("job")
    async def job(ctx: RunContext, payload: None) -> str:
        execution = [ctx.worker_id, ctx.attempt, time.monotonic()]
        executions.append(execution)
        try:
            if ctx.worker_id == "hung":
                await anyio.sleep(60)
            return ctx.worker_id
        finally:
            execution.append(time.monotonic())

    hung = fast_worker(
        tasks,
        dsn,
        lease_seconds=lease,
        heartbeat_interval=0.3,
        heartbeat_timeout=30,
        worker_id="hung",
    )
    fresh = fast_worker(tasks, dsn, lease_seconds=30, worker_id="fresh")
    # The hung worker may re-claim the run itself (its claims go out on another connection)
    # and lose it again: enough attempts for the other worker to end it.
    run_id = await trigger(dsn, "job", max_attempts=10)
    async with running(hung):
        await wait_until(lambda: bool(executions), within=10, what="the first execution")
        beats = hung.stats.heartbeats
        await wait_until(lambda: hung.stats.heartbeats > beats, within=5, what="a heartbeat")
        # The registry's tick follows each beat on the same connection. The backend is stopped
        # after it, between statements, so that it holds no lock and the next beat is the
        # statement that hangs. (Stopped right after the beat, in a CI run, the other worker
        # took 11 s to start and never saw the run re-queued.)
        ticks = hung.presence.ticks
        await wait_until(lambda: hung.presence.ticks > ticks, within=5, what="a registry tick")
        conn = hung.connections["heartbeat"].current
        assert conn is not None
        with stopped(conn.info.backend_pid):
            frozen_at = time.monotonic()
            await wait_until(
                lambda: len(executions[0]) == 4, within=lease + 2, what="the first to be cancelled"
            )
            async with running(fresh):
                await wait_until(
                    lambda: run_status(db, run_id) is RunStatus.COMPLETED,
                    within=lease + 15,
                    what="the other worker to re-claim and complete the run",
                )
    assert all(len(execution) == 4 for execution in executions), executions
    # Cancelled by its deadline: the last beat confirmed before the freeze, plus the lease.
    assert executions[0][3] - frozen_at < lease + 1.0, executions[0][3] - frozen_at
    for earlier, later in itertools.pairwise(executions):
        assert earlier[3] < later[2], f"two executions overlapped: {executions}"
    assert [worker for worker, *_ in executions][-1] == "fresh"
    assert hung.stats.lost_leases == len(executions) - 1
    assert hung.stats.completed == 0
    row = run_row(db, run_id)
    assert (row["attempts"], row["result"]) == (len(executions), "fresh")


@pytest.mark.usefixtures("signals")
async def test_hung_heartbeat_connection_is_replaced_before_the_leases_lapse(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """With the default heartbeat timeout (the interval, at least 1 s), a beat the server does
    not answer is abandoned, the next one goes out on a new connection, and the handler keeps
    its lease."""
    done = anyio.Event()
    tasks = TaskRegistry()

    @tasks.task("job")
    async def job(ctx: RunContext, payload: None) -> str:
        await done.wait()
        return "kept"

    worker = fast_worker(tasks, dsn, lease_seconds=6, heartbeat_interval=0.5)
    assert worker.heartbeat_timeout == 1.0
    run_id = await trigger(dsn, "job")
    async with running(worker):
        await wait_until(lambda: worker.stats.heartbeats > 0, within=10, what="a heartbeat")
        conn = worker.connections["heartbeat"].current
        assert conn is not None
        frozen = conn.info.backend_pid
        with stopped(frozen):
            beats = worker.stats.heartbeats
            await wait_until(
                lambda: worker.stats.heartbeats > beats + 1, within=6, what="beats on a new one"
            )
            replacement = worker.connections["heartbeat"].current
            assert replacement is not None
            assert replacement.info.backend_pid != frozen
            done.set()
            await wait_until(
                lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=5, what="completion"
            )
    assert worker.stats.lost_leases == 0
    row = run_row(db, run_id)
    assert (row["attempts"], row["result"]) == (1, "kept")


# -- the writer ------------------------------------------------------------------------------


@pytest.mark.usefixtures("signals")
async def test_unwritten_outcomes_are_bounded_and_a_hung_writer_is_replaced(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The writer connection's backend is stopped while an outcome is being written: one
    finished run's outcome (as many as the concurrency) waits without a slot, so the next run
    is claimed and runs; that one's outcome finds no room and it keeps its slot, so nothing
    more is claimed. Leases are kept, and the writes go out again on a new connection once the
    old one is abandoned."""
    tasks = TaskRegistry()

    @tasks.task("quick")
    async def quick(ctx: RunContext, payload: int) -> int:
        return payload

    # The stopped connection is abandoned this long (plus a grace) after the hung write is
    # sent, and the assertions on what waits must come before: a loaded box has taken more
    # than 3 s to claim, run and settle the overlapping run.
    timeout = 5.0
    worker = fast_worker(tasks, dsn, concurrency=1, lease_seconds=20, statement_timeout=timeout)
    signals = worker.enable_test_signals()
    async with running(worker):
        first = await trigger(dsn, "quick", 0)
        await wait_until(
            lambda: run_status(db, first) is RunStatus.COMPLETED, within=10, what="a first run"
        )
        conn = worker.connections["writer"].current
        assert conn is not None
        frozen = conn.info.backend_pid
        with stopped(frozen):
            hung = await trigger(dsn, "quick", 1)
            overlapped = await trigger(dsn, "quick", 2)
            queued = await trigger(dsn, "quick", 3)

            await signals.settled.wait_for(hung, within=timeout)
            await signals.settled.wait_for(overlapped, within=timeout)
            # Neither outcome is written; the second keeps its slot and nothing more is claimed.
            assert worker.held[hung].state is RunState.UNWRITTEN
            assert worker.held[overlapped].state is RunState.PARKED
            assert worker.runs.free == 0
            assert run_status(db, hung) is RunStatus.EXECUTING
            assert run_status(db, overlapped) is RunStatus.EXECUTING
            assert run_status(db, queued) is RunStatus.QUEUED
            await wait_until(
                lambda: run_status(db, queued) is RunStatus.COMPLETED,
                within=timeout + 5,
                what="the writes on a new connection, then the next run",
            )
            replacement = worker.connections["writer"].current
            assert replacement is not None
            assert replacement.info.backend_pid != frozen
    for run_id, result in ((hung, 1), (overlapped, 2), (queued, 3)):
        row = run_row(db, run_id)
        assert (row["status"], row["attempts"], row["result"]) == ("COMPLETED", 1, result)
    assert worker.stats.lost_leases == 0


async def test_heartbeats_stop_extending_a_finished_run_whose_outcome_is_not_written(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A run whose handler returned is kept alive for the outcome timeout only: past it, a
    beat leaves it out (its lease lapses, the database reclaims it), and once its deadline
    passes the worker lets go of it."""
    store = LeaseStore("fairlane", lease_seconds=30, worker_id="w")
    run_id = await trigger(dsn, "t")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        (claimed,) = await store.claim(conn, 1)
    active = ActiveRun(
        run=claimed,
        lease=Lease(claimed.id, claimed.lease_token),
        ctx=RunContext(run=claimed, worker_id="w"),
        confirmed_until=time.monotonic() + 30,
    )
    runs = RunTable(1)
    runs.claimed(active)
    runs.started(active)
    beater = Heartbeater(store, runs, interval=1.0, outcome_timeout=2.0)
    connection = LoopConnection(dsn)

    def lease_until() -> Any:
        return run_row(db, run_id)["lease_until"]

    try:
        runs.returned(active, time.monotonic(), time.monotonic())
        runs.settled(active, outcome_queued=True)
        assert (active.state.name, active.slot_held) == ("UNWRITTEN", False)
        before = lease_until()
        await beater.beat(connection)
        assert lease_until() > before, "within the outcome timeout, the lease is extended"
        extended = lease_until()
        active.done_at -= 3.0
        await beater.beat(connection)
        assert lease_until() == extended, "past it, the beat leaves the run out"
        assert beater.expire_unconfirmed() == active.confirmed_until
        assert run_id in runs.held
        active.confirmed_until = time.monotonic() - 0.1
        assert beater.expire_unconfirmed() is None
        assert active.state is RunState.RELEASED, "let go of"
        assert run_id not in runs.held
        assert (runs.running, runs.unwritten, runs.stats.lost_leases) == (0, 0, 1)
    finally:
        await connection.close()
