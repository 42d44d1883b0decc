"""Whether a database holds the schema this fairlane was built for.

Workers, Clients and the CLI check when they connect (a worker again whenever its claim
connection reconnects): the database's alembic revision must be this package's head, and the
checksums recorded for its SQL objects must be the ones ``sql/`` gives. Anything else raises
``SchemaMismatchError`` with the ``fairlane migrate`` hint, before a statement of the old or new
shape can do harm. Two small statements, once per connection.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import psycopg

from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import SchemaMismatchError, UnsupportedServerError
from fairlane.schema.objects import expected_checksums
from fairlane.schema.revision_hashes import migrations_dir

# The revision this package needs: the head of migrations/versions (a test holds them equal).
SCHEMA_REVISION = "0031"
# The oldest PostgreSQL the schema installs on and the suite runs against (server_version_num).
OLDEST_SERVER = 130000
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")


@cache
def known_revisions() -> frozenset[str]:
    """Every revision this package ships (to tell a newer database from an older one)."""
    names = (path.name for path in (migrations_dir() / "versions").iterdir())
    return frozenset(m.group(1) for m in map(_REVISION_FILE.match, names) if m)


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


def _check(schema: str) -> Operation[None]:
    """The check as an operation: sync and async callers drive the same statements."""
    state = engine(schema).schema_state
    tables = yield state.tables_exist()
    has_version, has_objects = tables[0] if tables else (False, False)
    if not has_version:
        judge(None, {}, schema)
    elif not has_objects:
        revision = yield state.revision()
        judge(revision[0] if revision else None, {}, schema)
    else:
        found = yield state.state()
        revision, recorded = found[0]
        judge(revision, recorded, schema)


def require_supported_server(server_version: int) -> None:
    """Refuse a server older than ``OLDEST_SERVER``, in one line naming the version needed.
    Costs no statement: libpq reports the version when it connects."""
    if server_version >= OLDEST_SERVER:
        return
    raise UnsupportedServerError(
        _version_text(server_version), f"{OLDEST_SERVER // 10000} or newer"
    )


def _version_text(number: int) -> str:
    """libpq's version number as PostgreSQL prints it: 120022 is 12.22, 90624 is 9.6.24."""
    if number >= 100000:
        return f"{number // 10000}.{number % 10000}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


# -- async, written once: the sync section below is generated from it ----------------------


async def check_schema_async(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """The start-up check (on an autocommit connection, or inside any transaction)."""
    require_supported_server(conn.info.server_version)
    await drive_async(conn, _check(schema))


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """The start-up check (on an autocommit connection, or inside any transaction)."""
    require_supported_server(conn.info.server_version)
    drive(conn, _check(schema))


# -- end of the generated sync section -------------------------------------------------------


def connect_checked(dsn: str | None = None, schema: str | None = None) -> psycopg.Connection[Any]:
    """An autocommit connection to a database whose schema passed the check (for the CLI)."""
    from fairlane.connection import ConnectionOptions

    url = psycopg_dsn(database_url(dsn))
    # A connect timeout and keepalives; a command's statements may take as long as they take.
    options = ConnectionOptions(statement_timeout=None, application_name="fairlane cli")
    conn = psycopg.connect(url, **options.kwargs(url))
    try:
        check_schema(conn, schema_name(schema))
    except BaseException:
        conn.close()
        raise
    return conn
