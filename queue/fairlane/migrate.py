"""Run fairlane's alembic migrations from code, the CLI or ``make migrate``."""

from __future__ import annotations

from pathlib import Path
from typing import LiteralString

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql

from fairlane.schema import VERSION_TABLE
from fairlane.settings import database_url, psycopg_dsn, schema_name, sqlalchemy_url
from fairlane.sqlfiles import query

SCHEMA_ATTRIBUTE = "fairlane_schema"
URL_ATTRIBUTE = "fairlane_url"


def migrations_dir() -> Path:
    """The alembic script folder: inside the installed wheel, else at the top of the tree."""
    packaged = Path(__file__).resolve().parent / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | None = None, schema: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes[URL_ATTRIBUTE] = database_url(url)
    config.attributes[SCHEMA_ATTRIBUTE] = schema_name(schema)
    return config


def migration_schema() -> str:
    """The schema the running migration targets (called from inside a migration)."""
    from alembic import context

    return schema_name(context.config.attributes.get(SCHEMA_ATTRIBUTE))


def run_named_sql(*names: str) -> None:
    """Execute named statements from ``sql/`` inside the running migration."""
    from alembic import op

    schema = migration_schema()
    for name in names:
        op.get_bind().exec_driver_sql(query(name, schema))


def drop_functions(*signatures: LiteralString) -> None:
    """``DROP FUNCTION IF EXISTS`` each of ``signatures`` (``name(argument types)``) in the
    migration's schema, inside the running migration."""
    from alembic import op
    from psycopg import sql

    schema = sql.Identifier(migration_schema())
    for signature in signatures:
        drop = sql.SQL("DROP FUNCTION IF EXISTS {}.{}").format(schema, sql.SQL(signature))
        op.get_bind().exec_driver_sql(drop.as_string(None))


def run_frozen_sql(filename: str, *names: str) -> None:
    """Execute statements frozen in ``migrations/sql/<filename>`` (old function bodies that a
    downgrade restores), inside the running migration."""
    from alembic import op

    from fairlane.sqlfiles import parse_named_statements, render

    schema = migration_schema()
    source = (migrations_dir() / "sql" / filename).read_text("utf-8")
    statements = parse_named_statements(source)
    for name in names:
        op.get_bind().exec_driver_sql(render(statements[name], schema))


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
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(dbname))))


def upgrade(url: str | None = None, schema: str | None = None, revision: str = "head") -> None:
    ensure_database(url)
    command.upgrade(alembic_config(url, schema), revision)


def downgrade(url: str | None = None, schema: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url, schema), revision)


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
