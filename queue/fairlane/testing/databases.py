"""Test databases: one migrated template per test session, a copy of it per test.

``CREATE DATABASE ... TEMPLATE`` copies a migrated database in a fraction of the time the
migrations take, so every test starts from a fresh, empty fairlane schema. The template and
the copies are named ``<prefix>_<pid>_<random>`` (``_<n>`` for a copy): sessions running at
once (pytest-xdist workers, CI jobs sharing a server) never meet. Everything is dropped
``WITH (FORCE)`` (PostgreSQL 13+), so a connection a test left open cannot keep a database.
"""

from __future__ import annotations

import itertools
import os
import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fairlane.config import psycopg_dsn, schema_name
from fairlane.schema import migrate

DEFAULT_SERVER_URL = "postgresql://127.0.0.1:5432/postgres"
DEFAULT_PREFIX = "fairlane_test"


class TemplateDatabases:
    """Databases on the server at ``server_url`` (any database of it: the plugin connects
    there to create and drop its own, or to ``postgres`` when that one does not exist)."""

    def __init__(
        self,
        server_url: str = DEFAULT_SERVER_URL,
        *,
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.server_dsn = psycopg_dsn(server_url)
        self.schema = schema_name(schema)
        self.template = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._copies = itertools.count(1)
        self._template_made = False

    def dsn(self, dbname: str) -> str:
        """The server's DSN, with ``dbname`` as its database."""
        return make_conninfo(self.server_dsn, dbname=dbname)

    def _admin(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.server_dsn, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as error:
            named = conninfo_to_dict(self.server_dsn).get("dbname")
            if named in (None, "postgres") or "does not exist" not in str(error):
                raise
        return psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=10)

    def make_template(self) -> str:
        """Create and migrate the template (once); returns its name."""
        if not self._template_made:
            with self._admin() as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
            self._template_made = True
            migrate.upgrade(self.dsn(self.template), self.schema)
        return self.template

    def copy(self) -> str:
        """A fresh copy of the template; returns its DSN."""
        template = self.make_template()
        name = f"{template}_{next(self._copies)}"
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
        with self._admin() as conn:
            conn.execute(statement.format(sql.Identifier(name), sql.Identifier(template)))
        return self.dsn(name)

    def drop(self, dsn_or_name: str) -> None:
        """Drop a copy (by DSN or name), whoever is still connected to it."""
        name = dsn_or_name
        if "=" in dsn_or_name or "://" in dsn_or_name:
            name = str(conninfo_to_dict(dsn_or_name)["dbname"])
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def close(self) -> None:
        """Drop the template."""
        if self._template_made:
            self.drop(self.template)
            self._template_made = False
