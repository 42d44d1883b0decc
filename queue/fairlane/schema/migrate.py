"""Upgrading a database to this fairlane: ``fairlane migrate``, ``make migrate``, ``upgrade()``.

An upgrade runs the alembic revisions (tables, indexes, constraints, data) and then installs
the SQL objects of ``sql/`` (``fairlane.schema.objects``), both under one advisory lock per
schema, so two deploys migrating at once take turns instead of colliding. Migrations are
forward-only: the only downgrade is to ``base``, which drops every object and table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql

from fairlane.config import database_url, psycopg_dsn, schema_name, sqlalchemy_url
from fairlane.errors import ConfigurationError
from fairlane.schema.check import require_supported_server
from fairlane.schema.install import InstallResult, drop_objects, install_objects, migration_lock
from fairlane.schema.revision_hashes import migrations_dir
from fairlane.schema.tables import VERSION_TABLE

SCHEMA_ATTRIBUTE = "fairlane_schema"
# How long one wait for the migration lock lasts before it starts again (_MigrationLock).
_LOCK_WAIT = "200ms"
URL_ATTRIBUTE = "fairlane_url"
HEAD = "head"
BASE = "base"


def alembic_config(
    url: str | None = None, schema: str | None = None, migrations: Path | None = None
) -> Config:
    """``migrations``: another copy of the alembic script folder (tests add revisions to one)."""
    config = Config()
    config.set_main_option("script_location", str(migrations or migrations_dir()))
    config.attributes[URL_ATTRIBUTE] = database_url(url)
    config.attributes[SCHEMA_ATTRIBUTE] = schema_name(schema)
    return config


def ensure_database(url: str | None = None) -> None:
    """Create the target database when it does not exist yet (first ``make migrate``)."""
    dsn = psycopg_dsn(database_url(url))
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
        return
    except psycopg.OperationalError as error:
        if "does not exist" not in str(error):
            raise
    dbname = psycopg.conninfo.conninfo_to_dict(dsn).get("dbname")
    admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(dbname))))


class _MigrationLock:
    """A connection holding the schema's migration lock at session level for the whole
    migration (the revisions run on alembic's own connection meanwhile)."""

    def __init__(self, url: str | None, schema: str) -> None:
        self.schema = schema
        self.conn = psycopg.connect(psycopg_dsn(database_url(url)), autocommit=True)

    def __enter__(self) -> psycopg.Connection[Any]:
        # Waited for in short statements: a statement waiting on the lock holds a snapshot,
        # and the migration that holds the lock may be building an index CONCURRENTLY, which
        # waits for every snapshot older than its own; one long wait would deadlock the two
        # (through this client, where PostgreSQL cannot see it). Each timeout ends the
        # waiter's snapshot and lets the build go on.
        self.conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(_LOCK_WAIT)))
        while True:
            try:
                self.conn.execute(migration_lock(self.schema, "pg_advisory_lock"))
            except psycopg.errors.LockNotAvailable:
                continue
            break
        self.conn.execute("RESET lock_timeout")
        return self.conn

    def __exit__(self, *exc: object) -> None:
        try:
            self.conn.execute(migration_lock(self.schema, "pg_advisory_unlock"))
        finally:
            self.conn.close()


def upgrade(
    url: str | None = None,
    schema: str | None = None,
    revision: str = HEAD,
    *,
    migrations: Path | None = None,
) -> InstallResult | None:
    """Run the revisions up to ``revision``; at head, install the SQL objects too. Returns what
    the install step changed (None when stopping short of head: only head is a running state)."""
    target = schema_name(schema)
    ensure_database(url)
    with _MigrationLock(url, target) as conn:
        require_supported_server(conn.info.server_version)
        config = alembic_config(url, target, migrations)
        command.upgrade(config, revision)
        head = ScriptDirectory.from_config(config).get_current_head()
        if revision != HEAD and revision != head:
            return None
        return install_objects(conn, target)


def downgrade(url: str | None = None, schema: str | None = None, revision: str = BASE) -> None:
    """Drop everything fairlane made in the schema: its SQL objects, then (through the
    revisions) its tables. Migrations are forward-only: no other target is accepted."""
    if revision != BASE:
        raise ConfigurationError(
            f"cannot downgrade to {revision!r}: fairlane's migrations are forward-only; "
            "`--downgrade` takes the schema down to base, dropping every table and function"
        )
    target = schema_name(schema)
    with _MigrationLock(url, target) as conn:
        with conn.transaction():
            drop_objects(conn, target)
        command.downgrade(alembic_config(url, target), BASE)


def current_revision(url: str | None = None, schema: str | None = None) -> str | None:
    """The revision the database is at, or None before the first migration."""
    from sqlalchemy import create_engine, pool

    target = schema_name(schema)
    engine = create_engine(sqlalchemy_url(database_url(url)), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={"version_table": VERSION_TABLE, "version_table_schema": target},
        )
        revision = context.get_current_revision()
    engine.dispose()
    return revision


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
