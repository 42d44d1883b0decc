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

from fairlane import tracing
from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import Statement, rows, rows_async
from fairlane.engine.triggers import TriggerRow
from fairlane.errors import QueueSizeLimitExceeded, UnsupportedConnectionError
from fairlane.triggering import eager
from fairlane.triggering.boundary import boundary_errors
from fairlane.triggering.request import TriggerRequest, environment_of, insert_params

if TYPE_CHECKING:
    # SQLAlchemy's asyncio extension needs greenlet; only callers who use it must have it.
    from sqlalchemy.ext.asyncio import AsyncConnection as AsyncSAConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    AsyncConnectionLike: TypeAlias = psycopg.AsyncConnection[Any] | AsyncSAConnection | AsyncSession

ConnectionLike = psycopg.Connection[Any] | SAConnection | Session


def trigger_statement(
    requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> Statement[TriggerRow]:
    """The statement ``trigger_many`` sends for ``requests``, checked as ``trigger_many``
    checks them (for callers that run it on a connection of their own)."""
    triggers = engine(schema_name(schema)).triggers
    runs_json = insert_params(requests)["runs"]
    if any(request.keyed for request in requests):
        return triggers.keyed(runs_json)
    return triggers.plain(runs_json)


def ids_in_order(requests: Sequence[TriggerRequest], rows: Sequence[TriggerRow]) -> list[int]:
    """Run ids in request order, or the typed error of a rejected trigger (a row with no id).
    The plain statement returns them in one row, in request order; the keyed one a row per
    request, numbered with its index (``item``)."""
    made: list[tuple[int, int]] = []
    for row in rows:
        if row.ids is not None:
            return row.ids
        if row.id is None:
            raise _size_error(requests, row)
        made.append((row.id if row.item is None else row.item, row.id))
    return [run_id for _order, run_id in sorted(made)]


def _size_error(requests: Sequence[TriggerRequest], row: TriggerRow) -> QueueSizeLimitExceeded:
    item, limit, size = row.item, row.size_limit or 0, row.size or 0
    if item is None:
        # The first request of that queue (or environment) past the room that was left.
        matching = [
            index
            for index, request in enumerate(requests)
            if environment_of(request) == row.environment
            and (row.scope == "environment" or request.queue == row.queue)
        ]
        item = matching[min(max(limit - size, 0), len(matching) - 1)]
    return QueueSizeLimitExceeded(
        row.environment or "",
        requests[item].queue,
        limit,
        scope=row.scope or "queue",
        size=size,
        index=item,
    )


def _sa_rows(statement: Statement[TriggerRow], result: Any) -> list[TriggerRow]:
    return [statement.row(row._mapping) for row in result.fetchall()]


# -- async, written once: the sync section below is generated from it ----------------------


async def trigger_many_async(
    conn: AsyncConnectionLike, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """Create every run in ``requests`` with one statement; returns their ids in order. In
    eager mode (``fairlane.testing.eager``) the runs are executed in-process instead."""
    mode = eager.active()
    if mode is not None and requests:
        return await mode.trigger_many_async(requests)
    return await insert_runs_async(conn, requests, schema=schema)


async def insert_runs_async(
    conn: AsyncConnectionLike, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """``trigger_many_async`` always on the database, even in eager mode (for fairlane's own
    triggers: a worker's children, schedule ticks, batch items)."""
    if not requests:
        return []
    with tracing.trigger_span(requests) as sent:
        ids = await _trigger_many_async(conn, sent, schema)
        tracing.record_run_ids(ids)
        return ids


async def _trigger_many_async(
    conn: AsyncConnectionLike, requests: Sequence[TriggerRequest], schema: str | None
) -> list[int]:
    statement = trigger_statement(requests, schema=schema)
    if isinstance(conn, psycopg.AsyncConnection):
        with boundary_errors():
            return ids_in_order(requests, await rows_async(conn, statement))
    from sqlalchemy.ext.asyncio import AsyncConnection as AsyncSAConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AsyncSAConnection):
        with boundary_errors():
            result = await conn.exec_driver_sql(statement.sql, statement.params)
        return ids_in_order(requests, _sa_rows(statement, result))
    raise UnsupportedConnectionError(conn)


async def trigger_async(
    conn: AsyncConnectionLike,
    task: str,
    payload: Any = None,
    *,
    schema: str | None = None,
    **options: Any,
) -> int:
    """Create one run inside the caller's transaction; returns its id."""
    requests = [TriggerRequest(task, payload, **options)]
    ids = await trigger_many_async(conn, requests, schema=schema)
    return ids[0]


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def trigger_many(
    conn: ConnectionLike, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """Create every run in ``requests`` with one statement; returns their ids in order. In
    eager mode (``fairlane.testing.eager``) the runs are executed in-process instead."""
    mode = eager.active()
    if mode is not None and requests:
        return mode.trigger_many(requests)
    return insert_runs(conn, requests, schema=schema)


def insert_runs(
    conn: ConnectionLike, requests: Sequence[TriggerRequest], *, schema: str | None = None
) -> list[int]:
    """``trigger_many`` always on the database, even in eager mode (for fairlane's own
    triggers: a worker's children, schedule ticks, batch items)."""
    if not requests:
        return []
    with tracing.trigger_span(requests) as sent:
        ids = _trigger_many(conn, sent, schema)
        tracing.record_run_ids(ids)
        return ids


def _trigger_many(
    conn: ConnectionLike, requests: Sequence[TriggerRequest], schema: str | None
) -> list[int]:
    statement = trigger_statement(requests, schema=schema)
    if isinstance(conn, psycopg.Connection):
        with boundary_errors():
            return ids_in_order(requests, rows(conn, statement))

    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, SAConnection):
        with boundary_errors():
            result = conn.exec_driver_sql(statement.sql, statement.params)
        return ids_in_order(requests, _sa_rows(statement, result))
    raise UnsupportedConnectionError(conn)


def trigger(
    conn: ConnectionLike,
    task: str,
    payload: Any = None,
    *,
    schema: str | None = None,
    **options: Any,
) -> int:
    """Create one run inside the caller's transaction; returns its id."""
    requests = [TriggerRequest(task, payload, **options)]
    ids = trigger_many(conn, requests, schema=schema)
    return ids[0]


# -- end of the generated sync section -------------------------------------------------------
