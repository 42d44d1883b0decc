"""Clients after an outage: a client used while its server was away serves the first call
after the server is back (the pool does not back off), even a call that waited while it came
back; waits whose LISTEN connection is lost listen again on a new one and miss nothing, and
one that cannot open it raises ``DatabaseUnavailable``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from fairlane import AsyncClient, Client, DatabaseUnavailable
from tests.faults.test_client_faults import CLIENT, InThread
from tests.helpers import poll, wait_until
from tests.helpers.faults import Proxy, closed_port

# Long enough for psycopg_pool's backoff (attempts 1, 2, 4, 8 s apart) to have left its next
# attempt seconds away when the server returns.
OUTAGE_S = 8.0
CONNECT_TIMEOUT_S = 1.0


@pytest.fixture
def proxy(db: psycopg.Connection[Any]) -> Any:
    with Proxy(db.info.host, db.info.port) as made:
        made.up()
        yield made


def test_a_client_used_during_an_outage_serves_the_first_call_after_it(
    dsn: str, proxy: Proxy
) -> None:
    with Client(proxy.dsn(dsn), connect_timeout=CONNECT_TIMEOUT_S) as client:
        client.count_by_status()
        proxy.down()
        failed = 0
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            with pytest.raises(DatabaseUnavailable, match="refused"):
                client.count_by_status()
            failed += 1
        proxy.up()
        started = time.monotonic()
        client.trigger("t")
        assert time.monotonic() - started < CONNECT_TIMEOUT_S
        assert failed >= OUTAGE_S / CONNECT_TIMEOUT_S - 1, "each outage call within its timeout"


@pytest.mark.anyio
async def test_an_async_client_used_during_an_outage_serves_the_first_call_after_it(
    dsn: str, proxy: Proxy
) -> None:
    async with AsyncClient(proxy.dsn(dsn), connect_timeout=CONNECT_TIMEOUT_S) as client:
        await client.count_by_status()
        proxy.down()
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            with pytest.raises(DatabaseUnavailable, match="refused"):
                await client.count_by_status()
        proxy.up()
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            await client.trigger("t")


def test_a_call_waiting_for_a_connection_gets_one_when_the_server_returns(
    dsn: str, proxy: Proxy
) -> None:
    """The server comes back while the call waits for a connection: the call asks the pool
    again and again, and each time the pool tries to connect again."""
    with Client(proxy.dsn(dsn), connect_timeout=5) as client:
        client.count_by_status()
        proxy.down()
        failures = client._connect_failures
        failures.succeeded()
        call = InThread(client.count_by_status)
        poll(lambda: failures.last is not None, within=5, what="the call's first attempt")
        proxy.up()
        call.join(10)
    assert call.error is None, call.error
    assert call.elapsed < 5


def listening_pids(db: psycopg.Connection[Any]) -> set[int]:
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = %s AND query LIKE 'LISTEN%%'",
        (CLIENT,),
    ).fetchall()
    return {pid for (pid,) in rows}


LISTENER_LOST_RUNS = 3
NO_POLL = 60.0


@pytest.mark.anyio
async def test_async_waits_survive_their_listener_being_terminated(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """The LISTEN backend is terminated while three waits sleep, and one run is cancelled
    straight away (its announcement may be lost with the connection): the reader listens
    again on a new connection and wakes every waiter to look, long before the fallback
    poll; a run cancelled after that is announced on the new connection."""
    async with AsyncClient(dsn) as client, AsyncClient(dsn) as canceller:
        ids = [await client.trigger("t") for _ in range(LISTENER_LOST_RUNS)]
        finished: list[int] = []

        async def waiter(run_id: int) -> None:
            await client.wait_for_run(run_id, poll_interval=NO_POLL)
            finished.append(run_id)

        with anyio.fail_after(NO_POLL / 2):
            async with anyio.create_task_group() as group:
                for run_id in ids:
                    group.start_soon(waiter, run_id)
                await wait_until(lambda: awaited(db, ids), what="every run awaited")
                (old,) = listening_pids(db)
                db.execute("SELECT pg_terminate_backend(%s)", (old,))
                await canceller.cancel(ids[0])
                await wait_until(lambda: bool(listening_pids(db) - {old}), what="a new listener")
                for run_id in ids[1:]:
                    await canceller.cancel(run_id)
        assert sorted(finished) == ids


def test_sync_waits_survive_their_listener_being_terminated(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    with Client(dsn) as client, Client(dsn) as canceller:
        ids = [client.trigger("t") for _ in range(LISTENER_LOST_RUNS)]

        def waiter(run_id: int) -> Callable[[], Any]:
            return lambda: client.wait_for_run(run_id, poll_interval=NO_POLL)

        calls = [InThread(waiter(run_id)) for run_id in ids]
        poll(lambda: awaited(db, ids), within=10, what="every run awaited")
        (old,) = listening_pids(db)
        db.execute("SELECT pg_terminate_backend(%s)", (old,))
        canceller.cancel(ids[0])
        poll(lambda: bool(listening_pids(db) - {old}), within=10, what="a new listener")
        for run_id in ids[1:]:
            canceller.cancel(run_id)
        for call in calls:
            call.join(NO_POLL / 2)
            assert call.error is None, call.error


def awaited(db: psycopg.Connection[Any], ids: list[int]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND has_waiters", (ids,)
    ).fetchone()
    return row == (len(ids),)


def test_a_listener_that_cannot_connect_raises_database_unavailable(dsn: str) -> None:
    """The waits' LISTEN connection goes where the pool's conninfo says; here the pool itself
    connects elsewhere (its kwargs win), so only the listener meets a closed port."""
    params = conninfo_to_dict(dsn)
    kwargs = {"autocommit": True, "host": params["host"], "port": params["port"]}
    closed = make_conninfo(dsn, host="127.0.0.1", port=closed_port())
    with (
        ConnectionPool(closed, kwargs=kwargs, min_size=1, max_size=1, open=True) as pool,
        Client(pool=pool) as client,
    ):
        run_id = client.trigger("t")
        with pytest.raises(DatabaseUnavailable, match="refused") as raised:
            client.wait_for_run(run_id, timeout=1)
        assert not raised.value.sent
