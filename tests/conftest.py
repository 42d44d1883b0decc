"""Test databases through pytest-postgresql.

The server at TEST_DATABASE_URL / DATABASE_URL / PG* (default 127.0.0.1:5432) is used when it
answers; otherwise pytest-postgresql starts a throwaway server from the local PostgreSQL
binaries. A template database is migrated once per session with alembic; every test gets a
fresh database cloned from it.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

from fairlane.schema import migrate
from fairlane.worker.lease_store import LeaseStore

SESSION_DB = f"fairlane_test_{os.getpid()}"


def _server_params() -> dict[str, Any]:
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    params: dict[str, Any] = conninfo_to_dict(url) if url else {}
    params.setdefault("host", os.environ.get("PGHOST", "127.0.0.1"))
    params.setdefault("port", int(os.environ.get("PGPORT", "5432")))
    params.setdefault("user", os.environ.get("PGUSER") or _default_user())
    params.setdefault("password", os.environ.get("PGPASSWORD"))
    return params


def _default_user() -> str:
    import getpass

    return getpass.getuser()


def _server_answers(params: dict[str, Any]) -> bool:
    conninfo = make_conninfo(
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        dbname="postgres",
        connect_timeout=3,
    )
    try:
        psycopg.connect(conninfo).close()
    except psycopg.OperationalError:
        return False
    return True


def migrate_template(**kwargs: Any) -> None:
    """pytest-postgresql calls this on the template database: apply every migration."""
    url = make_conninfo(
        host=kwargs["host"],
        port=kwargs["port"],
        user=kwargs["user"],
        password=kwargs.get("password"),
        dbname=kwargs["dbname"],
    )
    migrate.upgrade(url)


def _pg_ctl() -> str | None:
    found = shutil.which("pg_ctl")
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return str(candidates[0]) if candidates else None


SERVER = _server_params()
if _server_answers(SERVER):
    postgresql_server = factories.postgresql_noproc(
        host=SERVER["host"],
        port=SERVER["port"],
        user=SERVER["user"],
        password=SERVER["password"],
        dbname=SESSION_DB,
        load=[migrate_template],
    )
else:
    postgresql_server = factories.postgresql_proc(  # type: ignore[assignment]
        executable=_pg_ctl(), port=None, dbname=SESSION_DB, load=[migrate_template]
    )

postgresql = factories.postgresql("postgresql_server")


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async connections run on asyncio.
    return "asyncio"


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """A DSN for the test's own fresh, migrated database."""
    info = postgresql.info
    return make_conninfo(
        host=info.host,
        port=info.port,
        user=info.user,
        password=info.password or None,
        dbname=info.dbname,
    )


_empty_databases = itertools.count()


@pytest.fixture
def empty_database(postgresql_server: Any) -> Iterator[Callable[[], str]]:
    """Makes empty databases (nothing migrated) on the test server; returns their DSNs. They
    are dropped when the test ends."""
    with ExitStack() as stack:

        def make() -> str:
            janitor = DatabaseJanitor(
                user=postgresql_server.user,
                host=postgresql_server.host,
                port=postgresql_server.port,
                password=postgresql_server.password,
                dbname=f"{SESSION_DB}_empty_{next(_empty_databases)}",
            )
            stack.enter_context(janitor)
            return make_conninfo(
                host=janitor.host,
                port=janitor.port,
                user=janitor.user,
                password=janitor.password or None,
                dbname=janitor.dbname,
            )

        yield make


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database, for setting up and inspecting rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def store() -> LeaseStore:
    """The worker's fenced statements, for tests that claim and complete runs by hand."""
    return LeaseStore("fairlane", lease_seconds=30, worker_id="test")
