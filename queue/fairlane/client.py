"""The client: trigger runs and read them back, from async code or from sync code.

A ``Client`` owns at most one async and one sync connection, opened on first use and used
one statement at a time. To trigger inside your own transaction, use ``fairlane.trigger``
with your connection or session instead.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import psycopg

from fairlane import enqueue
from fairlane.errors import RunNotFoundError
from fairlane.models import Run
from fairlane.rows import run_from_row
from fairlane.settings import database_url, psycopg_dsn, schema_name
from fairlane.sqlfiles import query
from fairlane.trigger import TriggerRequest


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
            self._async_conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        return self._async_conn

    def _sync(self) -> psycopg.Connection[Any]:
        if self._sync_conn is None or self._sync_conn.closed:
            self._sync_conn = psycopg.Connection.connect(self.dsn, autocommit=True)
        return self._sync_conn

    async def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """Create a run (committed on return); returns its id."""
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

    async def get_run(self, run_id: int) -> Run:
        async with self._async_lock:
            conn = await self._conn()
            cursor = await conn.execute(query("get_run", self.schema), {"id": run_id})
            row = await cursor.fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return run_from_row(row)

    def get_run_sync(self, run_id: int) -> Run:
        with self._sync_lock:
            row = self._sync().execute(query("get_run", self.schema), {"id": run_id}).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return run_from_row(row)

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
