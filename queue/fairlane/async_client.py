"""The async client: ``Client``'s twin for asyncio code, method for method, with the same
operations (fairlane.control) driven on async connections.

It draws them from a psycopg_pool ``AsyncConnectionPool``, its own or the caller's
(``pool=``), with ``Client``'s guarantees: a connection checked before use, a call whose
statement never went out (or is safe to repeat) repeated once on another connection, bounded
connects and statements, ``DatabaseUnavailable`` or ``DatabaseTimeout`` on an outage. See
fairlane.client.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from fairlane import control, tracing
from fairlane.client import (
    DEFAULT_MAX_CONNECTIONS,
    bulk_filter,
    client_options,
    keyed_only,
    retry_once,
    run_filter,
    watch_dsn,
)
from fairlane.config import schema_name
from fairlane.connection import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_PREPARE_THRESHOLD,
    DEFAULT_STATEMENT_TIMEOUT,
    Deadline,
    bounded_async,
    pool_timeout,
    unavailable,
)
from fairlane.connection.pools import (
    CHECK_TIMEOUT_S,
    DEFAULT_CHECK_IDLE_AFTER,
    GETCONN_SLICE_S,
    RECONNECT_TIMEOUT_S,
    ConnectFailures,
    RecentAnswers,
    closed_while_idle,
    recording_async_connection,
)
from fairlane.control import BulkResult, CancelResult, RunFilter
from fairlane.durations import Duration
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive_async, rows_async
from fairlane.engine.waits import WaitsOn
from fairlane.errors import DatabaseUnavailable, RunWaitTimeoutError
from fairlane.models import Run
from fairlane.schema.check import check_schema_async
from fairlane.triggering import api as triggering
from fairlane.triggering import eager
from fairlane.triggering.boundary import boundary_errors
from fairlane.triggering.request import TriggerRequest
from fairlane.watching import POLL_INTERVAL_S, AsyncRunWatcher

T = TypeVar("T")
AsyncConn = psycopg.AsyncConnection[Any]

log = logging.getLogger("fairlane.client")


class AsyncClient:
    """``Client`` for asyncio: the same arguments, with an ``AsyncConnectionPool``."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float | None = None,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        listen: bool = True,
        check_idle_after: float = DEFAULT_CHECK_IDLE_AFTER,
    ) -> None:
        self.dsn, self.options = client_options(
            dsn, pool, max_connections, connect_timeout=connect_timeout,
            statement_timeout=statement_timeout, lock_timeout=lock_timeout,
            prepare_threshold=prepare_threshold,
        )  # fmt: skip
        self.schema = schema_name(schema)
        self.listen = listen
        self._engine = engine(self.schema)
        self._connect_failures = ConnectFailures()
        self._recent_answers = RecentAnswers(check_idle_after)
        if pool is None:
            assert self.dsn is not None
            self._pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn, connection_class=recording_async_connection(self._connect_failures),
                kwargs=self.options.kwargs(self.dsn), min_size=0, max_size=max_connections,
                open=False, timeout=self.options.connect_timeout,
                reconnect_timeout=RECONNECT_TIMEOUT_S,
                name="fairlane-async-client", num_workers=1,
            )  # fmt: skip
        else:
            self._pool = pool
        self._owns_pool = pool is None
        self._opened = not self._owns_pool
        self._open_lock = anyio.Lock()
        self._schema_checked = False
        self._watcher: AsyncRunWatcher | None = None

    # -- connections ------------------------------------------------------------------------

    async def _usable(self, conn: AsyncConn, give_up_at: float) -> bool:
        """Whether a connection from the pool may be used: one the server closed while it was
        idle is noticed without a round trip; one of the client's own pool that has not
        answered for ``check_idle_after`` must also answer an empty query within
        ``CHECK_TIMEOUT_S`` (a caller's pool checks as it was told)."""
        if closed_while_idle(conn):
            return False
        if not self._owns_pool or not self._recent_answers.needs_check(conn):
            return True
        within = min(CHECK_TIMEOUT_S, max(give_up_at - time.monotonic(), 0.05))
        try:
            async with bounded_async(conn, within):
                await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            return False
        return True

    async def _getconn(self) -> AsyncConn:
        """A checked connection within the connect timeout, or ``DatabaseUnavailable``."""
        if not self._opened:
            async with self._open_lock:
                if not self._opened:
                    await self._pool.open()
                    self._opened = True
        give_up_at = time.monotonic() + self.options.connect_timeout
        while True:
            remaining = give_up_at - time.monotonic()
            try:
                conn: AsyncConn = await self._pool.getconn(
                    timeout=max(min(remaining, GETCONN_SLICE_S), 0.001)
                )
            except PoolTimeout as error:
                if give_up_at - time.monotonic() > 0:
                    continue  # asking again has the pool try to connect again
                last = self._connect_failures.recent()
                raise pool_timeout(self.options.connect_timeout, last) from error
            try:
                usable = await self._usable(conn, give_up_at)
            except BaseException:
                await self._putconn(conn)
                raise
            if usable:
                return conn
            # Broken: the pool discards it. Then the next one, or a new one, at once.
            await self._putconn(conn)

    async def _putconn(self, conn: AsyncConn) -> None:
        # Shielded: a cancelled call must not keep its connection out of the pool.
        with anyio.CancelScope(shield=True):
            await self._pool.putconn(conn)

    async def _once(self, work: Callable[[AsyncConn], Awaitable[T]]) -> T:
        conn = await self._getconn()
        sent = False
        deadline: Deadline | None = None
        try:
            within = self.options.answer_within
            if not self._schema_checked:
                async with bounded_async(conn, within) as deadline:
                    await check_schema_async(conn, self.schema)
                self._schema_checked = True
            sent = True
            async with bounded_async(conn, within) as deadline:
                result = await work(conn)
                if not conn.autocommit:
                    await conn.commit()
            self._recent_answers.answered(conn)
            return result
        except psycopg.Error as error:
            failure = unavailable(error, sent=sent, deadline=deadline)
            if failure is None:
                raise
            raise failure from error
        finally:
            await self._putconn(conn)

    async def _call(
        self, work: Callable[[AsyncConn], Awaitable[T]], *, repeatable: bool = False
    ) -> T:
        try:
            return await self._once(work)
        except DatabaseUnavailable as failure:
            if not retry_once(failure, repeatable):
                raise
            log.info("%s; repeating the call once on another connection", failure)
        return await self._once(work)

    async def _drive(self, make: Callable[[], Operation[T]], *, repeatable: bool = False) -> T:
        async def work(conn: AsyncConn) -> T:
            return await drive_async(conn, make())

        return await self._call(work, repeatable=repeatable)

    async def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """``Client.trigger``: create a run, committed on return; returns its id."""
        return (await self.trigger_many([TriggerRequest(task, payload, **options)]))[0]

    async def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        """``Client.trigger_many``: one statement, all or none; ids in request order."""
        if not requests:
            return []
        mode = eager.active()
        if mode is not None:
            return await mode.trigger_many_async(requests)
        with tracing.trigger_span(requests) as sent:
            statement = triggering.trigger_statement(sent, schema=self.schema)

            async def work(conn: AsyncConn) -> list[int]:
                with boundary_errors():
                    return triggering.ids_in_order(sent, await rows_async(conn, statement))

            ids = await self._call(work, repeatable=keyed_only(sent))
            tracing.record_run_ids(ids)
            return ids

    async def create_failed_run(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        """``Client.create_failed_run``."""
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        with boundary_errors():
            return await self._drive(lambda: control.create_failed_run(self._engine, params))

    async def get_run(self, run_id: int) -> Run:
        eager_run = eager.eager_run(run_id)
        if eager_run is not None:
            return eager_run
        return await self._drive(lambda: control.get_run(self._engine, run_id), repeatable=True)

    async def list_runs(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        found = run_filter(filters, by)
        return await self._drive(lambda: control.list_runs(self._engine, found), repeatable=True)

    async def waits_on(self, run_id: int) -> list[WaitsOn]:
        """What a run waits on (a WAITING run's children, times, tokens, batch)."""
        return await self._drive(lambda: control.waits_on(self._engine, run_id), repeatable=True)

    async def retry_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Retry every matching run that ended badly, 1,000 per statement (each its own
        transaction), newest first; refuses an empty filter (pass ``RunFilter`` fields)."""
        found = bulk_filter(filters, by)
        return await self._drive(lambda: control.retry_many(self._engine, found))

    async def cancel_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Cancel every matching run still going, with its descendants, 1,000 per statement."""
        found = bulk_filter(filters, by)
        return await self._drive(lambda: control.cancel_many(self._engine, found))

    async def count_matching(self, filters: RunFilter | None = None, **by: Any) -> int:
        """How many runs ``retry_many`` or ``cancel_many`` would take."""
        found = run_filter(filters, by)
        return await self._drive(
            lambda: control.count_matching(self._engine, found), repeatable=True
        )

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
        deadline = math.inf if timeout is None else anyio.current_time() + max(timeout, 0.0)
        if not self.listen:
            return await self._poll_until_final(run, deadline, timeout, poll_interval)
        if self._watcher is None:
            watched_dsn = watch_dsn(self.dsn, self._pool.conninfo)
            listening = self.options.kwargs(watched_dsn)
            self._watcher = AsyncRunWatcher(watched_dsn, self.schema, listening)
        watcher = self._watcher
        try:
            await watcher.start()
        except psycopg.Error as error:
            failure = unavailable(error, sent=False)
            if failure is None:
                raise
            raise failure from error
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

    async def _poll_until_final(
        self, run: Run, deadline: float, waited: float | None, poll_interval: float
    ) -> Run:
        while not run.status.is_final:
            left = deadline - anyio.current_time()
            if left <= 0:
                raise RunWaitTimeoutError(run.id, waited or 0.0, run.status.value)
            await anyio.sleep(min(left, poll_interval))
            run = await self.get_run(run.id)
        return run

    async def _watch(self, run_id: int) -> Run:
        async def watch(conn: AsyncConn) -> Run:
            async with conn.transaction():
                return await drive_async(conn, control.watch_run(self._engine, run_id))

        return await self._call(watch, repeatable=True)

    async def count_by_status(self) -> dict[str, int]:
        return await self._drive(lambda: control.count_by_status(self._engine), repeatable=True)

    async def cancel(self, run_id: int) -> CancelResult:
        """``Client.cancel``."""
        return await self._drive(lambda: control.cancel(self._engine, run_id))

    async def reschedule(self, run_id: int, delay: Duration | datetime) -> Run:
        """``Client.reschedule``."""
        return await self._drive(
            lambda: control.reschedule(self._engine, run_id, delay), repeatable=True
        )

    async def retry(self, run_id: int) -> Run:
        """``Client.retry``."""
        return await self._drive(lambda: control.retry(self._engine, run_id))

    async def close(self) -> None:
        """Close the client's own pool (a caller's pool is left open)."""
        if self._owns_pool and self._opened:
            await self._pool.close()
        if self._watcher is not None:
            await self._watcher.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()
