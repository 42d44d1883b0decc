"""Whether a database holds the schema this fairlane was built for.

Workers, Clients and the CLI check when they connect (a worker again whenever its claim
connection reconnects): the database's alembic revision must be this package's head, and the
checksums recorded for its SQL objects must be the ones ``sql/`` gives. Anything else raises
``SchemaMismatchError`` with the ``fairlane migrate`` hint, before a statement of the old or new
shape can do harm. Two small statements, once per connection.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.engine.sqlfiles import query
from fairlane.errors import SchemaMismatchError
from fairlane.schema.migrate import migrations_dir
from fairlane.schema.objects import expected_checksums
from fairlane.schema.tables import VERSION_TABLE

# The revision this package needs: the head of migrations/versions (a test holds them equal).
SCHEMA_REVISION = "0013"
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")


@cache
def known_revisions() -> frozenset[str]:
    """Every revision this package ships (to tell a newer database from an older one)."""
    names = (path.name for path in (migrations_dir() / "versions").iterdir())
    return frozenset(m.group(1) for m in map(_REVISION_FILE.match, names) if m)


def _table_params(schema: str) -> dict[str, str]:
    return {
        "version_table": sql.Identifier(schema, VERSION_TABLE).as_string(None),
        "objects_table": sql.Identifier(schema, "schema_objects").as_string(None),
    }


def judge(revision: str | None, recorded: dict[str, str], schema: str) -> None:
    """Raise ``SchemaMismatchError`` unless ``revision`` and ``recorded`` checksums are this
    package's."""
    if revision != SCHEMA_REVISION:
        newer = revision is not None and revision not in known_revisions()
        raise SchemaMismatchError(revision, SCHEMA_REVISION, newer=newer)
    expected = expected_checksums(schema)
    differing = sorted(
        name
        for name in expected.keys() | recorded.keys()
        if expected.get(name) != recorded.get(name)
    )
    if differing:
        raise SchemaMismatchError(revision, SCHEMA_REVISION, differing=tuple(differing))


Step = tuple[str, dict[str, Any]]
Row = tuple[Any, ...] | None


def _steps(schema: str) -> Generator[Step, Row, None]:
    """The check as statements to run, each answered with its first row; sync and async
    callers drive the same steps."""
    tables = yield query("schema_tables_exist", schema), _table_params(schema)
    if tables is None or not tables[0]:
        judge(None, {}, schema)
    elif not tables[1]:
        found = yield query("schema_revision", schema), {}
        judge(found[0] if found else None, {}, schema)
    else:
        state = yield query("schema_state", schema), {}
        assert state is not None
        judge(state[0], dict(state[1]), schema)


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """The start-up check on a sync connection (autocommit, or inside any transaction)."""
    steps = _steps(schema)
    step = next(steps)
    while True:
        row = conn.execute(*step).fetchone()
        try:
            step = steps.send(row)
        except StopIteration:
            return


async def check_schema_async(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """``check_schema`` on an async connection."""
    steps = _steps(schema)
    step = next(steps)
    while True:
        cursor = await conn.execute(*step)
        row = await cursor.fetchone()
        try:
            step = steps.send(row)
        except StopIteration:
            return


def connect_checked(dsn: str | None = None, schema: str | None = None) -> psycopg.Connection[Any]:
    """An autocommit connection to a database whose schema passed the check (for the CLI)."""
    conn = psycopg.connect(psycopg_dsn(database_url(dsn)), autocommit=True)
    try:
        check_schema(conn, schema_name(schema))
    except BaseException:
        conn.close()
        raise
    return conn
