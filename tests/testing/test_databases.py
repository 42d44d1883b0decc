"""What the plugin's fixtures are made of: the template databases, the server setting, the
registry named in the ini file."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fairlane import TaskRegistry, trigger
from fairlane.errors import ConfigurationError
from fairlane.testing import TemplateDatabases, import_registry
from fairlane.testing.plugin import server_url
from fairlane.testing.workers import choose_registry

tasks = TaskRegistry()
not_a_registry = object()


def _names(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname", (f"{prefix}%",)
    )
    return [name for (name,) in rows.fetchall()]


def test_copies_of_a_migrated_template_are_dropped_with_it(postgresql_server: Any) -> None:
    # A server URL whose database does not exist: the databases are made from `postgres`.
    server = make_conninfo(
        host=postgresql_server.host,
        port=postgresql_server.port,
        user=postgresql_server.user,
        password=postgresql_server.password or None,
        dbname="no_such_database",
    )
    databases = TemplateDatabases(server, prefix="fairlane_plugin_check")
    admin = make_conninfo(server, dbname="postgres")
    try:
        first, second = databases.copy(), databases.copy()
        with psycopg.connect(first, autocommit=True) as conn:
            trigger(conn, "only_here")
        with psycopg.connect(second, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM fairlane.runs").fetchone()
            assert row == (0,), "each copy starts empty"
            # A connection left open does not keep its database from being dropped.
            databases.drop(second)
        with psycopg.connect(admin, autocommit=True) as conn:
            names = _names(conn, databases.template)
        assert names == [databases.template, conninfo_to_dict(first)["dbname"]]
    finally:
        databases.drop(first)
        databases.close()
    with psycopg.connect(admin, autocommit=True) as conn:
        assert _names(conn, databases.template) == []


class _Config:
    """The two things ``server_url`` asks of pytest's config."""

    def __init__(self, option: str | None, ini: str) -> None:
        self.option, self.ini = option, ini

    def getoption(self, name: str) -> str | None:
        return self.option

    def getini(self, name: str) -> str:
        return self.ini


def test_the_server_setting_comes_first_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_DATABASE_URL", "postgresql://test-server/postgres")
    monkeypatch.setenv("DATABASE_URL", "postgresql://app-server/app")
    url = server_url(_Config("postgresql://cli/postgres", "postgresql://ini/postgres"))  # type: ignore[arg-type]
    assert url == "postgresql://cli/postgres"
    assert server_url(_Config(None, "postgresql://ini/postgres")) == "postgresql://ini/postgres"  # type: ignore[arg-type]
    assert server_url(_Config(None, "")) == "postgresql://test-server/postgres"  # type: ignore[arg-type]
    monkeypatch.delenv("TEST_DATABASE_URL")
    assert server_url(_Config(None, "")) == "postgresql://app-server/app"  # type: ignore[arg-type]
    monkeypatch.delenv("DATABASE_URL")
    assert server_url(_Config(None, "")) == "postgresql://127.0.0.1:5432/postgres"  # type: ignore[arg-type]


def test_the_registry_named_in_the_ini_file() -> None:
    assert import_registry("tests.testing.test_databases:tasks") is tasks
    with pytest.raises(ConfigurationError, match="not a fairlane TaskRegistry"):
        import_registry("tests.testing.test_databases:not_a_registry")
    other = TaskRegistry()
    assert choose_registry(other, tasks) is other
    assert choose_registry(None, tasks) is tasks
    with pytest.raises(ConfigurationError, match="fairlane_tasks ini option"):
        choose_registry(None, None)
