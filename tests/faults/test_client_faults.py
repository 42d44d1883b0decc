"""Client and AsyncClient against dropped, hung and unreachable servers: a connection the
server dropped while idle is replaced, a call the server never answers ends in
``DatabaseTimeout`` shortly after the statement timeout, an unreachable server raises
``DatabaseUnavailable`` within the connect timeout, and only calls that are safe to repeat are
repeated."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from fairlane import AsyncClient, Client, DatabaseUnavailable
from fairlane.cli import main
from fairlane.connection import ABORT_GRACE_S
from fairlane.connection.pools import CHECK_TIMEOUT_S
from fairlane.errors import ConfigurationError, DatabaseTimeout, RunWaitTimeoutError
from fairlane.watching import RunWatcher
from tests.helpers import wait_until
from tests.helpers.faults import (
    backend_pids,
    backend_state,
    can_signal_backends,
    closed_port,
    silent_port,
    stopped,
)

CLIENT = "fairlane client"
# Scheduling noise allowed on top of a bound.
SLACK_S = 1.5


@pytest.fixture
def signals(db: psycopg.Connection[Any]) -> None:
    if not can_signal_backends(db):
        pytest.skip("needs to SIGSTOP the server's backends (same host, as root or postgres)")


def at_port(dsn: str, port: int) -> str:
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=port)
    return make_conninfo("", **params)


def terminate(db: psycopg.Connection[Any], application_name: str) -> list[int]:
    pids = backend_pids(db, application_name)
    for pid in pids:
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return pids


def run_count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def runs_locked(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction holding a lock that makes every trigger wait; rolled back at the end
    (or earlier, by the test)."""
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE fairlane.runs IN SHARE MODE")
        yield holder
        holder.rollback()


def wait_for_lock_wait(db: psycopg.Connection[Any], *, besides: tuple[int, ...] = ()) -> int:
    """The pid of the client backend waiting on a lock (not one of ``besides``)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for pid in backend_pids(db, CLIENT):
            if pid not in besides and backend_state(db, pid) == ("active", "Lock"):
                return pid
        time.sleep(0.02)
    raise AssertionError("no client backend came to wait on the lock")


class InThread:
    """Runs a call in a thread and keeps its outcome and how long it took."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.elapsed = 0.0
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            self.result = call()
        except BaseException as error:
            self.error = error
        self.elapsed = time.monotonic() - started

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the call did not return within {timeout}s"


# -- a connection dropped while idle -----------------------------------------------------------


def test_client_replaces_a_connection_the_server_dropped_while_idle(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    with Client(dsn) as client:
        client.trigger("t")
        assert terminate(db, CLIENT), "the client holds a connection"
        time.sleep(0.1)
        client.trigger("t")  # the pool's check finds the dead connection first
        assert client.count_by_status()["QUEUED"] == 2


@pytest.mark.anyio
async def test_async_client_replaces_a_connection_the_server_dropped_while_idle(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncClient(dsn) as client:
        await client.trigger("t")
        assert terminate(db, CLIENT)
        await anyio.sleep(0.1)
        await client.trigger("t")
        assert (await client.count_by_status())["QUEUED"] == 2


def test_client_on_a_callers_pool_without_check_repeats_what_never_went_out(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Without the pool's check, a connection closed while idle is noticed before the
    statement goes out (no round trip), so even a trigger without a key is repeated."""
    kwargs = {"autocommit": True, "application_name": CLIENT}
    with ConnectionPool(dsn, kwargs=kwargs, min_size=1, max_size=1, open=True) as pool:
        with Client(pool=pool) as client:
            client.trigger("t")
            assert terminate(db, CLIENT)
            time.sleep(0.1)
            client.trigger("t")
        assert not pool.closed, "the caller's pool is the caller's to close"
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert run_count(db) == 2


# -- bounded statements ------------------------------------------------------------------------


def test_timeouts_reach_the_server_as_connection_options(dsn: str) -> None:
    with Client(dsn, statement_timeout=7, lock_timeout=3) as client:
        client.count_by_status()
        with client._pool.connection() as conn:
            shown = [
                conn.execute(f"SHOW {name}").fetchone()
                for name in ("statement_timeout", "lock_timeout", "application_name")
            ]
    assert shown == [("7s",), ("3s",), (CLIENT,)]


def test_lock_timeout_raises_database_timeout(
    dsn: str, db: psycopg.Connection[Any], runs_locked: psycopg.Connection[Any]
) -> None:
    with Client(dsn, lock_timeout=0.3) as client:
        client.count_by_status()
        started = time.monotonic()
        with pytest.raises(DatabaseTimeout, match="lock timeout") as raised:
            client.trigger("t")
        assert time.monotonic() - started < 0.3 + SLACK_S
        assert raised.value.sent
        runs_locked.rollback()
        client.trigger("t")  # the connection is still good
    assert run_count(db) == 1


@pytest.mark.usefixtures("signals")
def test_stopped_backend_mid_statement_raises_within_the_statement_timeout(
    dsn: str, db: psycopg.Connection[Any], runs_locked: psycopg.Connection[Any]
) -> None:
    """The backend is stopped while the trigger waits on it: the server cannot cancel
    anything, so the client gives up on the connection itself."""
    timeout = 1.5
    with Client(dsn, statement_timeout=timeout, lock_timeout=None) as client:
        client.count_by_status()
        call = InThread(lambda: client.trigger("t"))
        pid = wait_for_lock_wait(db)
        with stopped(pid):
            runs_locked.rollback()
            call.join(timeout + ABORT_GRACE_S + 10)
        assert isinstance(call.error, DatabaseTimeout), call.error
        assert call.error.sent, "the statement had gone out: it may have been applied"
        assert call.elapsed < timeout + ABORT_GRACE_S + SLACK_S
        # The abandoned connection is not handed out again.
        client.trigger("t")


@pytest.mark.anyio
@pytest.mark.usefixtures("signals")
async def test_async_stopped_backend_mid_statement_raises_within_the_statement_timeout(
    dsn: str, db: psycopg.Connection[Any], runs_locked: psycopg.Connection[Any]
) -> None:
    timeout = 1.5
    async with AsyncClient(dsn, statement_timeout=timeout, lock_timeout=None) as client:
        await client.count_by_status()
        outcome: list[BaseException | None] = []
        started = time.monotonic()

        async def call() -> None:
            try:
                await client.trigger("t")
                outcome.append(None)
            except DatabaseUnavailable as error:
                outcome.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            pid = await anyio.to_thread.run_sync(wait_for_lock_wait, db)
            with stopped(pid):
                runs_locked.rollback()
                await wait_until(lambda: bool(outcome), within=timeout + 10, what="the trigger")
        elapsed = time.monotonic() - started
        assert isinstance(outcome[0], DatabaseTimeout), outcome
        assert elapsed < timeout + ABORT_GRACE_S + SLACK_S
        await client.trigger("t")


@pytest.mark.usefixtures("signals")
def test_stopped_idle_backend_is_replaced_by_the_check(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A connection whose backend hangs fails the check before use (bounded by the connect
    timeout), and the call goes out on a new connection. (``check_idle_after=0``: every use is
    checked, however recent the last answer.)"""
    with Client(dsn, connect_timeout=2, check_idle_after=0) as client:
        client.trigger("t")
        frozen = backend_pids(db, CLIENT)
        assert frozen, "the client holds a connection"
        with stopped(*frozen):
            started = time.monotonic()
            client.trigger("t")
            # Each hung connection costs one check; then a new one serves the call.
            assert time.monotonic() - started < len(frozen) * CHECK_TIMEOUT_S + SLACK_S
            assert set(backend_pids(db, CLIENT)) - set(frozen), "served by a new backend"
    assert run_count(db) == 2


@pytest.mark.anyio
@pytest.mark.usefixtures("signals")
async def test_a_connection_that_just_answered_goes_out_unchecked(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Within ``check_idle_after`` of its last answer a connection is used without the check's
    round trip: a backend frozen in that window gets the trigger itself (a check would have
    replaced it), and the statement's deadline bounds the call. The connection it gave up on is
    dropped, and the next call goes out on a new one."""
    timeout = 1.0
    async with AsyncClient(
        dsn, max_connections=1, statement_timeout=timeout, check_idle_after=60
    ) as client:
        await client.trigger("t")
        frozen = backend_pids(db, CLIENT)
        assert len(frozen) == 1
        with stopped(*frozen):
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout) as raised:
                await client.trigger("t")
            assert time.monotonic() - started < timeout + ABORT_GRACE_S + SLACK_S
            assert raised.value.sent, "the trigger went out on the frozen connection"
        await client.trigger("t")
        assert set(backend_pids(db, CLIENT)) - set(frozen), "served by a new backend"
    # The frozen backend may have inserted its run once it resumed: never more than once.
    assert run_count(db) in (2, 3)


def test_check_idle_after_must_not_be_negative(dsn: str) -> None:
    with pytest.raises(ConfigurationError, match="check_idle_after"):
        Client(dsn, check_idle_after=-1)


# -- repeated once, or not -------------------------------------------------------------------


def test_keyed_trigger_is_repeated_once_when_its_connection_is_lost(
    dsn: str, db: psycopg.Connection[Any], runs_locked: psycopg.Connection[Any]
) -> None:
    with Client(dsn, lock_timeout=None) as client:
        client.count_by_status()
        call = InThread(lambda: client.trigger("t", idempotency_key="k1"))
        first = wait_for_lock_wait(db)
        db.execute("SELECT pg_terminate_backend(%s)", (first,))
        # The repeat waits on the same lock, from another backend.
        wait_for_lock_wait(db, besides=(first,))
        runs_locked.rollback()
        call.join(10)
    assert call.error is None, call.error
    rows = db.execute("SELECT id FROM fairlane.runs").fetchall()
    assert rows == [(call.result,)]


def test_trigger_without_a_key_is_not_repeated_once_it_went_out(
    dsn: str, db: psycopg.Connection[Any], runs_locked: psycopg.Connection[Any]
) -> None:
    with Client(dsn, lock_timeout=None) as client:
        client.count_by_status()
        call = InThread(lambda: client.trigger("t"))
        pid = wait_for_lock_wait(db)
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        call.join(10)
        runs_locked.rollback()
        assert isinstance(call.error, DatabaseUnavailable), call.error
        assert not isinstance(call.error, DatabaseTimeout)
        assert call.error.sent
        assert isinstance(call.error.__cause__, psycopg.OperationalError)
        # The client goes on with a new connection.
        client.trigger("t")
    assert run_count(db) == 1


# -- unreachable -----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["refused", "silent"])
def test_unreachable_server_raises_within_the_connect_timeout(dsn: str, target: str) -> None:
    with silent_port() as silent:
        port = closed_port() if target == "refused" else silent
        with Client(at_port(dsn, port), connect_timeout=2) as client:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="no database connection within 2s"):
                client.trigger("t")
            assert time.monotonic() - started < 2 + SLACK_S
            with pytest.raises(DatabaseUnavailable) as again:
                client.get_run(1)
            assert not again.value.sent
            if target == "refused":
                assert "refused" in str(again.value)


@pytest.mark.anyio
async def test_async_unreachable_server_raises_within_the_connect_timeout(dsn: str) -> None:
    async with AsyncClient(at_port(dsn, closed_port()), connect_timeout=2) as client:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match="refused"):
            await client.trigger("t")
        assert time.monotonic() - started < 2 + SLACK_S


def test_cli_trigger_during_an_outage_prints_one_line(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["trigger", "t", "--dsn", at_port(dsn, closed_port())])
    err = capsys.readouterr().err
    assert status == 1  # an operational error: the database unavailable
    assert err.startswith("error: no database connection within"), err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


# -- the run watcher's LISTEN connection ---------------------------------------------------------


def test_the_run_watcher_listens_on_a_connection_with_the_clients_options(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """wait_for_run's LISTEN connection is opened like the client's own: its name, timeouts and
    keepalives (so a frozen server cannot hold a waiter up past the connect timeout)."""
    with Client(dsn) as client:
        run_id = client.trigger("t")
        with pytest.raises(RunWaitTimeoutError):
            client.wait_for_run(run_id, timeout=0.2)
        listeners = db.execute(
            "SELECT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        ).fetchall()
        assert listeners == [(CLIENT,)]


def test_the_run_watcher_gives_up_on_a_silent_server_within_the_connect_timeout(
    dsn: str,
) -> None:
    with silent_port() as silent, Client(dsn, connect_timeout=2) as client:
        target = at_port(dsn, silent)
        watcher = RunWatcher(target, "fairlane", client.options.kwargs(target))
        started = time.monotonic()
        try:
            with pytest.raises(psycopg.OperationalError):
                watcher.start()
            assert time.monotonic() - started < 2 + SLACK_S
        finally:
            watcher.close()
