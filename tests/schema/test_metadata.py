"""The revisions agree with the tables' ``MetaData``, a downgrade to base drops everything,
and a schema of fairlane's keeps to itself beside another one and an application's.

The ``dsn`` database is already migrated to head in schema ``fairlane`` (cloned from the
session's template), so these tests start from what ``make migrate`` leaves behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, pool

from fairlane import Client, RunStatus
from fairlane.config import sqlalchemy_url
from fairlane.errors import ConfigurationError
from fairlane.schema import VERSION_TABLE, build_metadata, migrate
from fairlane.schema.objects import manifest

# What every schema holds at head: the metadata's tables plus the version table, and every
# function that sql/ defines.
TABLES = {table.name for table in build_metadata("fairlane").tables.values()} | {VERSION_TABLE}
FUNCTIONS = {obj.name for obj in manifest("fairlane") if obj.kind == "function"}
TRIGGERS = {
    "runs_complete_waitpoints",
    "runs_notify_changed",
    "runs_notify_created",
    "runs_wake_waiters",
    "tokens_wake_at_commit",
}


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    engine = create_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    yield engine
    engine.dispose()


def schema_diff(engine: Engine, schema: str = "fairlane") -> list[Any]:
    """What autogenerate would write to bring ``schema`` to ``build_metadata(schema)``."""

    def include_name(name: str | None, type_: str, parent_names: object) -> bool:
        return name == schema if type_ == "schema" else True

    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "include_schemas": True,
                "include_name": include_name,
                "version_table": VERSION_TABLE,
                "version_table_schema": schema,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return list(compare_metadata(context, build_metadata(schema)))


def tables(db: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    return {name for (name,) in rows}


def functions(db: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = db.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s",
        (schema,),
    )
    return {name for (name,) in rows}


def version_rows(db: psycopg.Connection[Any], schema: str, table: str = VERSION_TABLE) -> list[str]:
    rows = db.execute(f'SELECT version_num FROM "{schema}"."{table}"').fetchall()
    return [version for (version,) in rows]


def test_migrations_match_the_metadata(engine: Engine, db: psycopg.Connection[Any]) -> None:
    # An application's own table in another schema is not fairlane's to compare.
    db.execute("CREATE TABLE public.app_orders (id serial PRIMARY KEY, total numeric)")
    assert schema_diff(engine) == []


def test_the_comparison_sees_drift(engine: Engine, db: psycopg.Connection[Any]) -> None:
    """The empty diff above means something: drift in fairlane's schema is reported."""
    db.execute("ALTER TABLE fairlane.runs ADD COLUMN stray integer")
    db.execute("ALTER TABLE fairlane.periodic_jobs ALTER COLUMN last_error TYPE varchar(10)")
    db.execute("DROP INDEX fairlane.runs_delayed_idx")
    found = {(diff[0], _name(diff)) for diff in _flatten(schema_diff(engine))}
    assert ("remove_column", "stray") in found
    assert ("modify_type", "last_error") in found
    assert ("add_index", "runs_delayed_idx") in found


def _flatten(diffs: list[Any]) -> list[Any]:
    # Column modifications come grouped in a list per column.
    return [item for diff in diffs for item in (diff if isinstance(diff, list) else [diff])]


def _name(diff: tuple[Any, ...]) -> str:
    kind = diff[0]
    if kind == "remove_column":
        return str(diff[3].name)
    if kind == "modify_type":
        return str(diff[3])
    return str(diff[1].name)


def triggers(db: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = db.execute(
        "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE c.relnamespace = to_regnamespace(%s) AND NOT t.tgisinternal",
        (schema,),
    )
    return {name for (name,) in rows}


def test_downgrade_to_base_drops_everything_and_upgrade_rebuilds_it(
    dsn: str, engine: Engine, db: psycopg.Connection[Any]
) -> None:
    head = migrate.head_revision()
    assert head is not None
    assert migrate.current_revision(dsn) == head
    assert version_rows(db, "fairlane") == [head]
    assert tables(db, "fairlane") == TABLES
    assert functions(db, "fairlane") == FUNCTIONS
    assert triggers(db, "fairlane") == TRIGGERS

    migrate.downgrade(dsn)
    assert migrate.current_revision(dsn) is None
    assert tables(db, "fairlane") == {VERSION_TABLE}
    assert version_rows(db, "fairlane") == []
    assert functions(db, "fairlane") == set()

    migrate.upgrade(dsn)
    assert migrate.current_revision(dsn) == head
    assert tables(db, "fairlane") == TABLES
    assert functions(db, "fairlane") == FUNCTIONS
    assert schema_diff(engine) == []
    # The periodic jobs are seeded again, and a run can be triggered into the new tables.
    jobs = db.execute("SELECT name FROM fairlane.periodic_jobs").fetchall()
    assert {("promote_delayed_runs",), ("reclaim_expired_leases",)} <= set(jobs)
    with Client(dsn) as client:
        run = client.get_run(client.trigger("after-roundtrip", {"ok": True}))
    assert run.status is RunStatus.QUEUED


def test_migrations_are_forward_only(dsn: str, db: psycopg.Connection[Any]) -> None:
    with pytest.raises(ConfigurationError, match="forward-only"):
        migrate.downgrade(dsn, revision="0005")
    assert migrate.current_revision(dsn) == migrate.head_revision()
    assert functions(db, "fairlane") == FUNCTIONS


def test_a_second_schema_lives_beside_the_default_one(
    dsn: str, engine: Engine, db: psycopg.Connection[Any]
) -> None:
    # An application that uses alembic too: its version table is in public, under alembic's
    # default name, with its own revision.
    db.execute("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
    db.execute("INSERT INTO public.alembic_version VALUES ('app_0042')")
    head = migrate.head_revision()

    migrate.upgrade(dsn, schema="tenant_x")
    assert migrate.current_revision(dsn, schema="tenant_x") == head
    assert migrate.current_revision(dsn, schema="fairlane") == head
    assert tables(db, "tenant_x") == TABLES
    assert version_rows(db, "tenant_x") == [head]
    assert version_rows(db, "fairlane") == [head]
    assert schema_diff(engine, "tenant_x") == []
    assert schema_diff(engine, "fairlane") == []

    # Runs go to the schema their client names, and each schema seeds its own periodic jobs.
    with Client(dsn, schema="tenant_x") as tenant, Client(dsn) as default:
        tenant_run = tenant.trigger("tenant-task")
        default.trigger("default-task")
        assert tenant.get_run(tenant_run).task == "tenant-task"
    for schema, task in (("tenant_x", "tenant-task"), ("fairlane", "default-task")):
        rows = db.execute(f"SELECT task FROM {schema}.runs").fetchall()
        assert rows == [(task,)]
    seeded = "SELECT name, function FROM {}.periodic_jobs ORDER BY name"
    tenant_jobs = db.execute(seeded.format("tenant_x")).fetchall()
    assert tenant_jobs == db.execute(seeded.format("fairlane")).fetchall()
    assert len(tenant_jobs) >= 2

    # Taking one schema down leaves the other, and the application's revision, alone.
    migrate.downgrade(dsn, schema="tenant_x")
    assert tables(db, "tenant_x") == {VERSION_TABLE}
    assert functions(db, "tenant_x") == set()
    assert functions(db, "fairlane") == FUNCTIONS
    assert migrate.current_revision(dsn, schema="tenant_x") is None
    assert tables(db, "fairlane") == TABLES
    assert migrate.current_revision(dsn, schema="fairlane") == head
    assert db.execute("SELECT task FROM fairlane.runs").fetchall() == [("default-task",)]

    assert version_rows(db, "public", "alembic_version") == ["app_0042"]
    with engine.connect() as connection:
        app = MigrationContext.configure(connection)  # alembic's defaults: public.alembic_version
        assert app.get_current_revision() == "app_0042"
    assert tables(db, "public") == {"alembic_version"}
