"""The client: trigger runs, read them back and act on them, from async or from sync code.

A ``Client`` owns at most one async and one sync connection, opened on first use and used
one statement at a time, each committed on return. A new connection is checked first: a
database whose schema is not this fairlane's raises ``SchemaMismatchError``. To trigger inside
your own transaction, use ``fairlane.trigger`` with your connection or session instead. Every
async method has a ``_sync`` twin.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import anyio
import psycopg

from fairlane import control
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.control import CancelResult, RunFilter
from fairlane.durations import Duration
from fairlane.engine.rows import run_from_row
from fairlane.engine.sqlfiles import query
from fairlane.errors import RunNotFoundError
from fairlane.models import Run
from fairlane.schema.check import check_schema, check_schema_async
from fairlane.triggering import api as enqueue
from fairlane.triggering.request import TriggerRequest

Row = tuple[Any, ...]


def _filter(filters: RunFilter | None, by: dict[str, Any]) -> RunFilter:
    if filters is not None and by:
        raise TypeError("pass a RunFilter or filter keywords, not both")
    return filters or RunFilter(**by)


class Client:
    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        self._async_conn: psycopg.AsyncConnection[Any] | None = None
        self._async_lock = anyio.Lock()
        self._sync_conn: psycopg.Connection[Any] | None = None
        self._sync_lock = threading.Lock()

    async def _conn(self) -> psycopg.AsyncConnection[Any]:
        if self._async_conn is None or self._async_conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            try:
                await check_schema_async(conn, self.schema)
            except BaseException:
                await conn.close()
                raise
            self._async_conn = conn
        return self._async_conn

    def _sync(self) -> psycopg.Connection[Any]:
        if self._sync_conn is None or self._sync_conn.closed:
            conn = psycopg.Connection.connect(self.dsn, autocommit=True)
            try:
                check_schema(conn, self.schema)
            except BaseException:
                conn.close()
                raise
            self._sync_conn = conn
        return self._sync_conn

    async def _rows(self, name: str, params: dict[str, Any]) -> list[Row]:
        async with self._async_lock:
            conn = await self._conn()
            cursor = await conn.execute(query(name, self.schema), params)
            return await cursor.fetchall()

    def _rows_sync(self, name: str, params: dict[str, Any]) -> list[Row]:
        with self._sync_lock:
            return self._sync().execute(query(name, self.schema), params).fetchall()

    # -- triggering -------------------------------------------------------------------------

    async def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """Create a run (committed on return); returns its id.

        ``options`` are ``TriggerRequest``'s: delay, ttl, idempotency_key (+ idempotency_scope,
        idempotency_ttl, parent_run_id, parent_attempt), debounce=Debounce(...), priority,
        queue, environment, max_attempts, max_duration, tags, metadata, machine. With an
        idempotency key or debounce the id may be an existing run's.
        """
        return (await self.trigger_many([TriggerRequest(task, payload, **options)]))[0]

    async def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        """Create many runs in one statement, all or none; returns ids in request order."""
        async with self._async_lock:
            conn = await self._conn()
            return await enqueue.trigger_many_async(conn, requests, schema=self.schema)

    def trigger_sync(self, task: str, payload: Any = None, **options: Any) -> int:
        """``trigger`` for sync code (a WSGI view, a script)."""
        return self.trigger_many_sync([TriggerRequest(task, payload, **options)])[0]

    def trigger_many_sync(self, requests: Sequence[TriggerRequest]) -> list[int]:
        with self._sync_lock:
            return enqueue.trigger_many(self._sync(), requests, schema=self.schema)

    async def create_failed_run(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        """Create a run that has already ended SYSTEM_FAILURE with ``code`` (for instance
        ``PAYLOAD_TOO_LARGE``): it never runs, and whatever waits on it sees it final.
        ``options``: environment, queue, parent_run_id, tags, metadata, machine."""
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        return int((await self._rows("insert_failed_run", params))[0][0])

    def create_failed_run_sync(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        return int(self._rows_sync("insert_failed_run", params)[0][0])

    # -- reading ----------------------------------------------------------------------------

    async def get_run(self, run_id: int) -> Run:
        rows = await self._rows("get_run", {"id": run_id})
        if not rows:
            raise RunNotFoundError(run_id)
        return run_from_row(rows[0])

    def get_run_sync(self, run_id: int) -> Run:
        rows = self._rows_sync("get_run", {"id": run_id})
        if not rows:
            raise RunNotFoundError(run_id)
        return run_from_row(rows[0])

    async def list_runs(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        """Runs newest first, filtered by environment, queue, task, status, tags (all
        optional): pass a ``RunFilter`` or its fields as keywords."""
        params = _filter(filters, by).params()
        return [run_from_row(row) for row in await self._rows("list_runs", params)]

    def list_runs_sync(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        params = _filter(filters, by).params()
        return [run_from_row(row) for row in self._rows_sync("list_runs", params)]

    # -- acting on runs ---------------------------------------------------------------------

    async def cancel(self, run_id: int) -> CancelResult:
        """End a run CANCELED, with every descendant still going; a no-op on a final run.

        A QUEUED or DELAYED run ends at once. An EXECUTING one ends at once too, and its worker
        is told to cancel the handler, whose outcome the lease fence then refuses.
        """
        rows = await self._rows("cancel_run", {"id": run_id})
        return control.cancel_result(run_id, rows[0] if rows else None)

    def cancel_sync(self, run_id: int) -> CancelResult:
        rows = self._rows_sync("cancel_run", {"id": run_id})
        return control.cancel_result(run_id, rows[0] if rows else None)

    async def reschedule(self, run_id: int, delay: Duration | datetime) -> Run:
        """Move a DELAYED run's start to ``delay`` from now, or to an aware datetime.

        Raises ``RunNotDelayedError`` when the run is not DELAYED (it started or ended)."""
        rows = await self._rows("reschedule_run", control.reschedule_params(run_id, delay))
        control.check_rescheduled(run_id, rows[0] if rows else None)
        return await self.get_run(run_id)

    def reschedule_sync(self, run_id: int, delay: Duration | datetime) -> Run:
        rows = self._rows_sync("reschedule_run", control.reschedule_params(run_id, delay))
        control.check_rescheduled(run_id, rows[0] if rows else None)
        return self.get_run_sync(run_id)

    async def retry(self, run_id: int) -> Run:
        """Requeue a run that ended FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE with
        one more attempt (see ``sql/run_control.sql``). Raises ``RunNotRetryableError`` for
        other statuses and ``QueueSizeLimitExceeded`` when its queue is full."""
        rows = await self._rows("retry_run", {"id": run_id})
        control.check_retried(run_id, rows[0] if rows else None)
        return await self.get_run(run_id)

    def retry_sync(self, run_id: int) -> Run:
        rows = self._rows_sync("retry_run", {"id": run_id})
        control.check_retried(run_id, rows[0] if rows else None)
        return self.get_run_sync(run_id)

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._async_conn is not None:
            await self._async_conn.close()
        self.close_sync()

    def close_sync(self) -> None:
        if self._sync_conn is not None:
            self._sync_conn.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close_sync()
