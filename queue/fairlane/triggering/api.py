"""Run the trigger statement on the caller's connection, sync or async.

Accepted: a psycopg ``Connection``/``AsyncConnection``, or a SQLAlchemy ``Connection``,
``Session``, ``AsyncConnection`` or ``AsyncSession`` (psycopg or psycopg2 driver). The
statement joins the caller's transaction; committing it is the caller's business.

A bulk trigger is all or nothing: every request gets a run (new, or the one its idempotency
key or debounce key leads to), or none is written and a typed error names the first request
that could not be taken. A full queue raises ``QueueSizeLimitExceeded`` without aborting the
caller's transaction (the statement inserts nothing and reports the limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.orm import Session

from fairlane.config import schema_name
from fairlane.engine.sqlfiles import query
from fairlane.errors import QueueSizeLimitExceeded, UnsupportedConnectionError
from fairlane.triggering.request import TriggerRequest, insert_params

if TYPE_CHECKING:
    # SQLAlchemy's asyncio extension needs greenlet; only callers who use it must have it.
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    AsyncConnectionLike: TypeAlias = psycopg.AsyncConnection[Any] | SAAsyncConnection | AsyncSession

SyncConnection = psycopg.Connection[Any] | SAConnection | Session


def _statement(requests: Sequence[TriggerRequest], schema: str | None) -> str:
    keyed = any(request.keyed for request in requests)
    return query("trigger_keyed_runs" if keyed else "insert_runs", schema_name(schema))


def trigger_statement(
    requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> tuple[str, dict[str, str]]:
    """The statement ``trigger_many`` sends for ``requests`` and its parameters, checked as
    ``trigger_many`` checks them (for callers that run it on a connection of their own)."""
    return _statement(requests, schema), insert_params(requests)


def _ids(requests: Sequence[TriggerRequest], rows: Sequence[Sequence[Any]]) -> list[int]:
    """Run ids in request order, or the typed error of a rejected trigger.

    Rows are (id, outcome, environment, queue, size_limit, scope, size, item); a rejection is
    one row with a NULL id. The keyed statement numbers its rows with the request index
    (``item``); the plain one inserts in request order, so there sorted ids follow it.
    """
    for row in rows:
        if row[0] is None:
            raise _size_error(requests, row)
    if rows and rows[0][7] is not None:
        return [int(row[0]) for row in sorted(rows, key=lambda row: int(row[7]))]
    return sorted(int(row[0]) for row in rows)


def _size_error(requests: Sequence[TriggerRequest], row: Sequence[Any]) -> QueueSizeLimitExceeded:
    _id, _outcome, environment, queue, limit, scope, size, item = row
    if item is None:
        # The first request of that queue (or environment) past the room that was left.
        matching = [
            index for index, request in enumerate(requests)
            if request.environment == environment
            and (scope == "environment" or request.queue == queue)
        ]  # fmt: skip
        item = matching[min(max(limit - size, 0), len(matching) - 1)]
    return QueueSizeLimitExceeded(
        environment, requests[item].queue, limit, scope=scope, size=size, index=item
    )


def trigger_many(
    conn: SyncConnection, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """Create every run in ``requests`` with one statement; returns their ids in order."""
    if not requests:
        return []
    statement, params = trigger_statement(requests, schema=schema)
    if isinstance(conn, psycopg.Connection):
        return _ids(requests, conn.execute(statement, params).fetchall())
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, SAConnection):
        return _ids(requests, conn.exec_driver_sql(statement, params).fetchall())
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
    statement, params = trigger_statement(requests, schema=schema)
    if isinstance(conn, psycopg.AsyncConnection):
        cursor = await conn.execute(statement, params)
        return _ids(requests, await cursor.fetchall())
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, SAAsyncConnection):
        result = await conn.exec_driver_sql(statement, params)
        return _ids(requests, result.fetchall())
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
