"""Run the trigger statement on the caller's connection, sync or async.

Accepted: a psycopg ``Connection``/``AsyncConnection``, or a SQLAlchemy ``Connection``,
``Session``, ``AsyncConnection`` or ``AsyncSession`` (psycopg or psycopg2 driver). The
statement joins the caller's transaction; committing it is the caller's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.orm import Session

from fairlane.errors import UnsupportedConnectionError
from fairlane.settings import schema_name
from fairlane.sqlfiles import query
from fairlane.trigger import TriggerRequest, insert_params

if TYPE_CHECKING:
    # SQLAlchemy's asyncio extension needs greenlet; only callers who use it must have it.
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    AsyncConnectionLike: TypeAlias = psycopg.AsyncConnection[Any] | SAAsyncConnection | AsyncSession

SyncConnection = psycopg.Connection[Any] | SAConnection | Session


def _ids(rows: Sequence[Sequence[Any]]) -> list[int]:
    # One statement numbers its rows in insertion order, so sorted ids follow the input order.
    return sorted(int(row[0]) for row in rows)


def trigger_many(
    conn: SyncConnection, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """Create every run in ``requests`` with one statement; returns their ids in order."""
    if not requests:
        return []
    params = insert_params(requests)
    statement = query("insert_runs", schema_name(schema))
    if isinstance(conn, psycopg.Connection):
        return _ids(conn.execute(statement, params).fetchall())
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, SAConnection):
        return _ids(conn.exec_driver_sql(statement, params).fetchall())
    raise UnsupportedConnectionError(conn)


def trigger(
    conn: SyncConnection,
    task: str,
    payload: Any = None,
    *,
    schema: str | None = None,
    **options: Any,
) -> int:
    """Create one run inside the caller's transaction; returns its id."""
    return trigger_many(conn, [TriggerRequest(task, payload, **options)], schema=schema)[0]


async def trigger_many_async(
    conn: AsyncConnectionLike, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """The async twin of ``trigger_many``: same statement, same checks."""
    if not requests:
        return []
    params = insert_params(requests)
    statement = query("insert_runs", schema_name(schema))
    if isinstance(conn, psycopg.AsyncConnection):
        cursor = await conn.execute(statement, params)
        return _ids(await cursor.fetchall())
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, SAAsyncConnection):
        result = await conn.exec_driver_sql(statement, params)
        return _ids(result.fetchall())
    raise UnsupportedConnectionError(conn)


async def trigger_async(
    conn: AsyncConnectionLike,
    task: str,
    payload: Any = None,
    *,
    schema: str | None = None,
    **options: Any,
) -> int:
    """Create one run inside the caller's async transaction; returns its id."""
    requests = [TriggerRequest(task, payload, **options)]
    return (await trigger_many_async(conn, requests, schema=schema))[0]
