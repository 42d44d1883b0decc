"""The workers registry, read: the workers that registered (fairlane.worker.presence keeps a
worker's row) and the tasks with queued runs that no live worker serves.

Each function takes a psycopg connection, sync or (the ``_async`` twin) async; they only read.
"""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import first, first_async, rows, rows_async
from fairlane.errors import ListLimitError
from fairlane.models import UnservedTask, WorkerInfo

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]

# The most unserved tasks a call returns (and a metric scrape reports).
DEFAULT_UNSERVED_LIMIT = 100


def _checked_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ListLimitError(limit)
    return limit


# -- async, written once: the sync section below is generated from it ----------------------


async def list_workers_async(conn: AsyncConn, *, schema: str | None = None) -> list[WorkerInfo]:
    """Every registered worker, live ones first (``WorkerInfo.live``)."""
    return await rows_async(conn, engine(schema_name(schema)).workers.list())


async def unserved_tasks_async(
    conn: AsyncConn, *, limit: int = DEFAULT_UNSERVED_LIMIT, schema: str | None = None
) -> list[UnservedTask]:
    """The tasks, per environment, with QUEUED runs that no live worker serves (none has the
    task's handler and serves the runs' environment and queue), longest waiting first."""
    statement = engine(schema_name(schema)).workers.unserved(_checked_limit(limit))
    return await rows_async(conn, statement)


async def task_served_async(
    conn: AsyncConn,
    task: str,
    *,
    environment: str = "default",
    queue: str = "default",
    schema: str | None = None,
) -> bool:
    """Whether a live worker serves ``task`` in ``environment`` and ``queue``: has its handler
    and serves that environment and queue."""
    statement = engine(schema_name(schema)).workers.served(task, environment, queue)
    served = await first_async(conn, statement)
    return served is True


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def list_workers(conn: Conn, *, schema: str | None = None) -> list[WorkerInfo]:
    """Every registered worker, live ones first (``WorkerInfo.live``)."""
    return rows(conn, engine(schema_name(schema)).workers.list())


def unserved_tasks(
    conn: Conn, *, limit: int = DEFAULT_UNSERVED_LIMIT, schema: str | None = None
) -> list[UnservedTask]:
    """The tasks, per environment, with QUEUED runs that no live worker serves (none has the
    task's handler and serves the runs' environment and queue), longest waiting first."""
    statement = engine(schema_name(schema)).workers.unserved(_checked_limit(limit))
    return rows(conn, statement)


def task_served(
    conn: Conn,
    task: str,
    *,
    environment: str = "default",
    queue: str = "default",
    schema: str | None = None,
) -> bool:
    """Whether a live worker serves ``task`` in ``environment`` and ``queue``: has its handler
    and serves that environment and queue."""
    statement = engine(schema_name(schema)).workers.served(task, environment, queue)
    served = first(conn, statement)
    return served is True


# -- end of the generated sync section -------------------------------------------------------
