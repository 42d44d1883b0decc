"""The pytest plugin: enable it in your project's conftest.py with

    pytest_plugins = ["fairlane.testing"]

(``pip install fairlane[testing]``). It is never loaded on its own: installing fairlane
registers no pytest entry point. Fixtures:

- ``fairlane_dsn``: the DSN of a fresh, migrated database of the test's own, copied from a
  template migrated once per session, dropped when the test ends;
- ``fairlane_client`` / ``fairlane_async_client``: a ``Client`` / ``AsyncClient`` of it (the
  async one in an anyio test, ``@pytest.mark.anyio``);
- ``fairlane_worker``: ``.worker(tasks)`` makes a ``Worker`` of it, ``.drain(tasks)`` /
  ``await .drain_async(tasks)`` runs one until nothing is due;
- ``fairlane_eager``: ``fairlane_eager(tasks)`` turns eager mode on until the test ends and
  returns its ``EagerRuns`` (no database involved).

Settings (ini options, or the command line's): ``fairlane_database_url`` names the server
(default: ``TEST_DATABASE_URL``, ``DATABASE_URL``, else postgresql://127.0.0.1:5432/postgres),
``fairlane_schema`` fairlane's schema (default ``FAIRLANE_SCHEMA`` or ``fairlane``) and
``fairlane_tasks`` the ``module:attribute`` of the ``TaskRegistry`` the worker and eager
fixtures use when given none.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack

import pytest

from fairlane.async_client import AsyncClient
from fairlane.client import Client
from fairlane.testing.databases import DEFAULT_SERVER_URL, TemplateDatabases
from fairlane.testing.eager import EagerRuns, eager
from fairlane.testing.workers import WorkerFixture, choose_registry
from fairlane.worker import TaskRegistry
from fairlane.worker.registry import import_registry

DATABASE_URL_HELP = (
    "PostgreSQL server for fairlane's test databases (default: $TEST_DATABASE_URL, "
    f"$DATABASE_URL, else {DEFAULT_SERVER_URL})"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fairlane")
    group.addoption("--fairlane-database-url", help=DATABASE_URL_HELP)
    parser.addini("fairlane_database_url", DATABASE_URL_HELP)
    parser.addini("fairlane_schema", "fairlane's schema in the test databases")
    parser.addini(
        "fairlane_tasks",
        "module:attribute of the TaskRegistry fairlane_worker and "
        "fairlane_eager use when given none",
    )


def server_url(config: pytest.Config) -> str:
    """The first of: --fairlane-database-url, the fairlane_database_url ini option,
    TEST_DATABASE_URL, DATABASE_URL, the local server."""
    given = config.getoption("--fairlane-database-url") or config.getini("fairlane_database_url")
    return str(
        given
        or os.environ.get("TEST_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or DEFAULT_SERVER_URL
    )


def _schema(config: pytest.Config) -> str | None:
    return str(config.getini("fairlane_schema") or "") or None


@pytest.fixture(scope="session")
def fairlane_databases(pytestconfig: pytest.Config) -> Iterator[TemplateDatabases]:
    """The session's template (migrated on first use, dropped at the end) and its copies."""
    databases = TemplateDatabases(server_url(pytestconfig), schema=_schema(pytestconfig))
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(scope="session")
def fairlane_tasks(pytestconfig: pytest.Config) -> TaskRegistry | None:
    """The registry the ``fairlane_tasks`` ini option names, or None."""
    spec = str(pytestconfig.getini("fairlane_tasks") or "")
    return import_registry(spec) if spec else None


@pytest.fixture
def fairlane_dsn(fairlane_databases: TemplateDatabases) -> Iterator[str]:
    """A fresh migrated database for this test; dropped when it ends."""
    dsn = fairlane_databases.copy()
    try:
        yield dsn
    finally:
        fairlane_databases.drop(dsn)


@pytest.fixture
def fairlane_client(fairlane_dsn: str, fairlane_databases: TemplateDatabases) -> Iterator[Client]:
    with Client(fairlane_dsn, schema=fairlane_databases.schema) as client:
        yield client


@pytest.fixture
async def fairlane_async_client(
    fairlane_dsn: str, fairlane_databases: TemplateDatabases
) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(fairlane_dsn, schema=fairlane_databases.schema) as client:
        yield client


@pytest.fixture
def fairlane_worker(
    fairlane_dsn: str, fairlane_databases: TemplateDatabases, fairlane_tasks: TaskRegistry | None
) -> WorkerFixture:
    return WorkerFixture(fairlane_dsn, schema=fairlane_databases.schema, registry=fairlane_tasks)


@pytest.fixture
def fairlane_eager(
    fairlane_tasks: TaskRegistry | None,
) -> Iterator[Callable[..., EagerRuns]]:
    """``fairlane_eager(tasks=None, *, propagate=False)``: eager mode until the test ends."""
    with ExitStack() as stack:

        def turn_on(tasks: TaskRegistry | None = None, *, propagate: bool = False) -> EagerRuns:
            registry = choose_registry(tasks, fairlane_tasks)
            return stack.enter_context(eager(registry, propagate=propagate))

        yield turn_on
