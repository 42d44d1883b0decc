"""Parameters given in the DSN win over fairlane's defaults: a ``connect_timeout`` in the DSN
is the client's connect timeout against a server that never answers (and the one its error
names), unless the client is given one itself."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, Client, DatabaseUnavailable, TaskRegistry, Worker
from tests.faults.test_client_faults import CLIENT, SLACK_S, at_port
from tests.helpers.faults import silent_port


def test_a_dsn_connect_timeout_bounds_a_call_to_a_silent_server(dsn: str) -> None:
    with silent_port() as silent, Client(at_port(dsn, silent) + " connect_timeout=3") as client:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match="no database connection within 3s"):
            client.trigger("t")
        took = time.monotonic() - started
    assert 3 - 0.1 < took < 3 + SLACK_S


def test_a_connect_timeout_passed_to_the_client_wins_over_the_dsns(dsn: str) -> None:
    with silent_port() as silent:
        target = at_port(dsn, silent) + " connect_timeout=30"
        with Client(target, connect_timeout=2) as client:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="within 2s"):
                client.trigger("t")
            assert time.monotonic() - started < 2 + SLACK_S


@pytest.mark.anyio
async def test_the_async_client_takes_the_dsns_connect_timeout(dsn: str) -> None:
    with silent_port() as silent:
        async with AsyncClient(at_port(dsn, silent) + " connect_timeout=3") as client:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable, match="within 3s"):
                await client.trigger("t")
            assert 3 - 0.1 < time.monotonic() - started < 3 + SLACK_S


def test_the_dsns_parameters_reach_the_server(dsn: str, db: psycopg.Connection[Any]) -> None:
    """application_name and a ``-c`` setting of the DSN's options win over fairlane's."""
    mine = dsn + " application_name=mine options='-c statement_timeout=42s'"
    with Client(mine, statement_timeout=7) as client:
        client.count_by_status()
        with client._pool.connection() as conn:
            shown = [conn.execute(f"SHOW {name}").fetchone() for name in SHOWN]
    assert shown == [("mine",), ("42s",), ("10s",)]
    # Only this test's database: other tests' clients may still be closing.
    assert not db.execute(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database()",
        (CLIENT,),
    ).fetchall()


SHOWN = ("application_name", "statement_timeout", "lock_timeout")


def test_a_worker_takes_the_dsns_connect_timeout(dsn: str) -> None:
    def connect_timeout(dsn: str, given: float | None = None) -> float:
        worker = Worker(TaskRegistry(), dsn, connect_timeout=given)
        return worker.connection_options.connect_timeout

    assert connect_timeout(dsn + " connect_timeout=3") == 3
    assert connect_timeout(dsn) == 5
    assert connect_timeout(dsn + " connect_timeout=3", 7) == 7
