"""The async client: ``Client``'s twin for asyncio code, method for method, with the same
operations (fairlane.control) driven on an async connection.

It owns one connection, opened on first use, used one call at a time (a lock), in
autocommit; a new connection is checked against the schema first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import psycopg

from fairlane import control
from fairlane.client import bulk_filter, run_filter
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.control import BulkResult, CancelResult, RunFilter
from fairlane.durations import Duration
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive_async
from fairlane.engine.waits import WaitsOn
from fairlane.errors import RunWaitTimeoutError
from fairlane.models import Run
from fairlane.schema.check import check_schema_async
from fairlane.triggering import api as triggering
from fairlane.triggering.request import TriggerRequest
from fairlane.watching import POLL_INTERVAL_S, AsyncRunWatcher

T = TypeVar("T")


class AsyncClient:
    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        self._engine = engine(self.schema)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = anyio.Lock()
        self._watcher: AsyncRunWatcher | None = None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            try:
                await check_schema_async(conn, self.schema)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _drive(self, operation: Operation[T]) -> T:
        async with self._lock:
            return await drive_async(await self._connection(), operation)

    async def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """``Client.trigger``: create a run, committed on return; returns its id."""
        return (await self.trigger_many([TriggerRequest(task, payload, **options)]))[0]

    async def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        """Create many runs in one statement, all or none; returns ids in request order."""
        async with self._lock:
            conn = await self._connection()
            return await triggering.trigger_many_async(conn, requests, schema=self.schema)

    async def create_failed_run(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        """``Client.create_failed_run``."""
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        return await self._drive(control.create_failed_run(self._engine, params))

    async def get_run(self, run_id: int) -> Run:
        return await self._drive(control.get_run(self._engine, run_id))

    async def list_runs(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        return await self._drive(control.list_runs(self._engine, run_filter(filters, by)))

    async def waits_on(self, run_id: int) -> list[WaitsOn]:
        """What a run waits on (a WAITING run's children, times, tokens, batch)."""
        return await self._drive(control.waits_on(self._engine, run_id))

    async def retry_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Retry every matching run that ended badly, 1,000 per statement (each its own
        transaction), newest first; refuses an empty filter (pass ``RunFilter`` fields)."""
        return await self._drive(control.retry_many(self._engine, bulk_filter(filters, by)))

    async def cancel_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Cancel every matching run still going, with its descendants, 1,000 per statement."""
        return await self._drive(control.cancel_many(self._engine, bulk_filter(filters, by)))

    async def count_matching(self, filters: RunFilter | None = None, **by: Any) -> int:
        """How many runs ``retry_many`` or ``cancel_many`` would take."""
        return await self._drive(control.count_matching(self._engine, run_filter(filters, by)))

    async def wait_for_run(
        self,
        run_id: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - raises a typed error, not a cancel
        poll_interval: float = POLL_INTERVAL_S,
    ) -> Run:
        """``Client.wait_for_run``: wait until the run is final and return it."""
        run = await self.get_run(run_id)
        if run.status.is_final:
            return run
        if self._watcher is None:
            self._watcher = AsyncRunWatcher(self.dsn, self.schema)
        watcher = self._watcher
        await watcher.start()
        deadline = math.inf if timeout is None else anyio.current_time() + max(timeout, 0.0)
        watched = False
        while True:
            event = watcher.register(run_id)
            try:
                if watched:
                    run = await self.get_run(run_id)
                else:
                    run = await self._watch(run_id)
                    watched = True
                if run.status.is_final:
                    return run
                left = deadline - anyio.current_time()
                if left <= 0:
                    raise RunWaitTimeoutError(run_id, timeout or 0.0, run.status.value)
                await watcher.wait(event, min(left, poll_interval))
            finally:
                watcher.unregister(run_id, event)

    async def _watch(self, run_id: int) -> Run:
        async with self._lock:
            conn = await self._connection()
            async with conn.transaction():
                return await drive_async(conn, control.watch_run(self._engine, run_id))

    async def count_by_status(self) -> dict[str, int]:
        return await self._drive(control.count_by_status(self._engine))

    async def cancel(self, run_id: int) -> CancelResult:
        """``Client.cancel``."""
        return await self._drive(control.cancel(self._engine, run_id))

    async def reschedule(self, run_id: int, delay: Duration | datetime) -> Run:
        """``Client.reschedule``."""
        return await self._drive(control.reschedule(self._engine, run_id, delay))

    async def retry(self, run_id: int) -> Run:
        """``Client.retry``."""
        return await self._drive(control.retry(self._engine, run_id))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        if self._watcher is not None:
            await self._watcher.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()
