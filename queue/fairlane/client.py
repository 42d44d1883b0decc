# Generated from fairlane/async_client.py by tools/async_to_sync.py: do not edit.
"""The clients: trigger runs, read them back and act on them, from async code
(``AsyncClient``, fairlane.async_client) or sync code (``Client``, fairlane.client, which
tools/async_to_sync.py generates from fairlane.async_client: the same methods without
``await``, threads where the async client has tasks). Limits, schedules, tokens, workers and
batches are the namespaces ``client.limits``, ``client.schedules``, ``client.tokens``,
``client.workers`` and ``client.batches`` (fairlane.async_namespaces, generated into
fairlane.namespaces).

A client draws its connections from a psycopg_pool ``ConnectionPool``: its own (at most
``max_connections``, opened on first use), or one of the caller's (``pool=``). Every call
runs in autocommit and is committed on return. Connections survive what a server does to
them:

- a connection the server dropped while idle (a restart, ``pg_terminate_backend``) is
  noticed without a round trip and replaced before a statement goes out; one of the client's
  own pool that has not answered for ``check_idle_after`` (default 0.5 s) must also answer an
  empty query first, so one whose server hangs is replaced too. One that answered more
  recently goes out unchecked (the check is a round trip, as long as a trigger's own), and a
  call on it that its server no longer answers ends at its statement's deadline;
- a call whose connection failed before its statement was sent, or whose statement is safe to
  repeat (reads, a reschedule, a trigger whose every request has an idempotency key), is
  repeated once on another connection;
- ``connect_timeout`` bounds getting a connection, ``statement_timeout`` and
  ``lock_timeout`` every statement (connection parameters, so nothing is SET on the session);
  a server that does not answer at all is given up on ``ABORT_GRACE_S`` after the statement
  timeout. An outage raises ``DatabaseUnavailable``, a statement out of time
  ``DatabaseTimeout``: never a hang, never a raw psycopg error.

The first connection is checked against the schema: a database whose schema is not this
fairlane's raises ``SchemaMismatchError``. To trigger inside your own transaction, use
``fairlane.trigger`` with your connection or session instead.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from fairlane import control, tracing
from fairlane.batches.client import BatchClient
from fairlane.client_common import (
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
    bounded,
    connect_failure,
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
    recording_connection,
)
from fairlane.control import BulkResult, CancelResult, RunFilter
from fairlane.durations import Duration
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive, rows
from fairlane.engine.waits import WaitsOn
from fairlane.errors import DatabaseUnavailable, RunWaitTimeoutError
from fairlane.models import Run, RunStep
from fairlane.namespaces import Limits, Schedules, Tokens, Workers
from fairlane.schema.check import SCHEMA_REVISION, check_schema
from fairlane.triggering import api as triggering
from fairlane.triggering import eager
from fairlane.triggering.boundary import boundary_errors
from fairlane.triggering.request import TriggerRequest
from fairlane.watching import POLL_INTERVAL_S, RunWatcher

__all__ = ["DEFAULT_MAX_CONNECTIONS", "Client"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]

log = logging.getLogger("fairlane.client")


class Client:
    """A client of the database at ``dsn`` (default: ``DATABASE_URL``), or of ``pool``.

    ``max_connections`` (default 4) caps the client's own pool. ``connect_timeout`` (default:
    the DSN's own ``connect_timeout``, else 5 s) bounds getting a connection;
    ``statement_timeout`` (30 s) and ``lock_timeout`` (10 s) bound each statement (None: the
    server's setting); a DSN's other parameters win over fairlane's defaults likewise
    (README, Connections and outages). With a caller's pool, the timeouts the server enforces
    are the pool's own connection parameters (see ``ConnectionOptions.kwargs``); fairlane
    still gives up on a call at ``statement_timeout`` plus ``ABORT_GRACE_S``. The pool should
    be autocommit (a call on a connection that is not is committed on return) and have a
    ``check``.
    ``check_idle_after`` (seconds, default 0.5): how long a connection of the client's own pool
    may sit idle and still go out without the empty-query check; 0 checks before every call.
    Behind a PgBouncer in transaction mode: ``prepare_threshold=None`` (psycopg's threshold,
    default 5; None never prepares) unless it tracks prepared statements, and ``listen=False``
    (``wait_for_run`` polls every ``poll_interval`` instead of LISTENing).
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        pool: ConnectionPool[Any] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float | None = None,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        listen: bool = True,
        check_idle_after: float = DEFAULT_CHECK_IDLE_AFTER,
    ) -> None:
        self.dsn, self.options = client_options(
            dsn,
            pool,
            max_connections,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            prepare_threshold=prepare_threshold,
        )
        self.schema = schema_name(schema)
        self.listen = listen
        self._engine = engine(self.schema)
        self._connect_failures = ConnectFailures()
        self._recent_answers = RecentAnswers(check_idle_after)
        if pool is None:
            assert self.dsn is not None
            self._pool: ConnectionPool[Any] = ConnectionPool(
                self.dsn,
                connection_class=recording_connection(self._connect_failures),
                kwargs=self.options.kwargs(self.dsn),
                min_size=0,
                max_size=max_connections,
                open=False,
                timeout=self.options.connect_timeout,
                reconnect_timeout=RECONNECT_TIMEOUT_S,
                name="fairlane-client",
                num_workers=1,
            )
        else:
            self._pool = pool
        self._owns_pool = pool is None
        self._opened = not self._owns_pool
        self._open_lock = threading.Lock()
        self._schema_checked = False
        self._watcher: RunWatcher | None = None
        self._watcher_lock = threading.Lock()
        self.limits = Limits(self)
        self.schedules = Schedules(self)
        self.tokens = Tokens(self)
        self.workers = Workers(self)
        # Batches keep a connection of their own, without the statement timeout: an ingest
        # slice is as long as the caller's chunks make it. Opened on first use.
        self.batches = BatchClient(
            watch_dsn(self.dsn, self._pool.conninfo),
            schema=self.schema,
            prepare_threshold=self.options.prepare_threshold,
        )

    # -- connections ------------------------------------------------------------------------

    def _usable(self, conn: Conn, give_up_at: float) -> bool:
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
            with bounded(conn, within):
                ConnectionPool.check_connection(conn)
        except psycopg.Error:
            return False
        return True

    def _getconn(self) -> Conn:
        """A checked connection within the connect timeout, or ``DatabaseUnavailable``."""
        if not self._opened:
            with self._open_lock:
                if not self._opened:
                    self._pool.open()
                    self._opened = True
        give_up_at = time.monotonic() + self.options.connect_timeout
        while True:
            remaining = give_up_at - time.monotonic()
            try:
                conn: Conn = self._pool.getconn(timeout=max(min(remaining, GETCONN_SLICE_S), 0.001))
            except PoolTimeout as error:
                last = self._connect_failures.recent()
                # A missing database, a refused login or a malformed URL stays so: said at
                # once, as the worker says it, instead of after the whole connect timeout.
                mistake = None if last is None else connect_failure(last, SCHEMA_REVISION)
                if mistake is not None:
                    raise mistake from None
                if give_up_at - time.monotonic() > 0:
                    continue  # asking again has the pool try to connect again
                raise pool_timeout(self.options.connect_timeout, last) from error
            try:
                usable = self._usable(conn, give_up_at)
            except BaseException:
                self._putconn(conn)
                raise
            if usable:
                return conn
            # Broken: the pool discards it. Then the next one, or a new one, at once.
            self._putconn(conn)

    def _putconn(self, conn: Conn) -> None:
        self._pool.putconn(conn)

    def _once(self, work: Callable[[Conn], T]) -> T:
        conn = self._getconn()
        sent = False
        deadline: Deadline | None = None
        try:
            within = self.options.answer_within
            if not self._schema_checked:
                with bounded(conn, within) as deadline:
                    check_schema(conn, self.schema)
                self._schema_checked = True
            sent = True
            with bounded(conn, within) as deadline:
                result = work(conn)
                if not conn.autocommit:
                    conn.commit()
            self._recent_answers.answered(conn)
            return result
        except psycopg.Error as error:
            failure = unavailable(error, sent=sent, deadline=deadline)
            if failure is None:
                raise
            raise failure from error
        finally:
            self._putconn(conn)

    def _call(self, work: Callable[[Conn], T], *, repeatable: bool = False) -> T:
        """``work`` on a connection of the pool, committed; repeated once on another
        connection when the first was lost before its statement went out, or at any point
        when ``repeatable``."""
        try:
            return self._once(work)
        except DatabaseUnavailable as failure:
            if not retry_once(failure, repeatable):
                raise
            log.info("%s; repeating the call once on another connection", failure)
        return self._once(work)

    def _drive(self, make: Callable[[], Operation[T]], *, repeatable: bool = False) -> T:
        def work(conn: Conn) -> T:
            return drive(conn, make())

        return self._call(work, repeatable=repeatable)

    # -- triggering -------------------------------------------------------------------------

    def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """Create a run (committed on return); returns its id.

        ``options`` are ``TriggerRequest``'s: delay, ttl, idempotency_key (+ idempotency_scope,
        idempotency_ttl, parent_run_id, parent_attempt), debounce=Debounce(...), priority,
        queue, concurrency_key, environment, max_attempts, max_duration, tags, metadata,
        machine. With an
        idempotency key or debounce the id may be an existing run's.
        """
        ids = self.trigger_many([TriggerRequest(task, payload, **options)])
        return ids[0]

    def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        """Create many runs in one statement, all or none; returns ids in request order.

        Repeated once on another connection if the connection is lost and every request has an
        idempotency key (the repeat finds the runs the first attempt made, if it made any).
        In eager mode (``fairlane.testing.eager``) the runs execute in-process instead."""
        if not requests:
            return []
        mode = eager.active()
        if mode is not None:
            return mode.trigger_many(requests)
        with tracing.trigger_span(requests) as sent:
            # Checked before a connection is taken: a bad option costs no round trip.
            statement = triggering.trigger_statement(sent, schema=self.schema)

            def work(conn: Conn) -> list[int]:
                with boundary_errors():
                    return triggering.ids_in_order(sent, rows(conn, statement))

            ids = self._call(work, repeatable=keyed_only(sent))
            tracing.record_run_ids(ids)
            return ids

    def create_failed_run(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        """Create a run that has already ended SYSTEM_FAILURE with ``code`` (for instance
        ``PAYLOAD_TOO_LARGE``): it never runs, and whatever waits on it sees it final.
        ``options``: environment, queue, parent_run_id, tags, metadata, machine."""
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        with boundary_errors():
            return self._drive(lambda: control.create_failed_run(self._engine, params))

    # -- reading ----------------------------------------------------------------------------

    def get_run(self, run_id: int) -> Run:
        """Raises ``RunNotFoundError`` for an unknown id. In eager mode, an eager run's id
        (negative) reads the eager run."""
        eager_run = eager.eager_run(run_id)
        if eager_run is not None:
            return eager_run
        return self._drive(lambda: control.get_run(self._engine, run_id), repeatable=True)

    def list_runs(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        """Runs newest first, filtered by environment, queue, task, status, tags (all
        optional): pass a ``RunFilter`` or its fields as keywords."""
        found = run_filter(filters, by)
        return self._drive(lambda: control.list_runs(self._engine, found), repeatable=True)

    def waits_on(self, run_id: int) -> list[WaitsOn]:
        """What a run waits on (a WAITING run's children, times, tokens, batch)."""
        return self._drive(lambda: control.waits_on(self._engine, run_id), repeatable=True)

    def steps(self, run_id: int) -> list[RunStep]:
        """A run's recorded steps (``ctx.step``) and waits, by call position, with their
        timings and results (docs/durable-execution.md)."""
        return self._drive(lambda: control.steps(self._engine, run_id), repeatable=True)

    def retry_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Retry every matching run that ended badly, 1,000 per statement (each its own
        transaction), newest first; refuses an empty filter (pass ``RunFilter`` fields)."""
        found = bulk_filter(filters, by)
        return self._drive(lambda: control.retry_many(self._engine, found))

    def cancel_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Cancel every matching run still going, with its descendants, 1,000 per statement."""
        found = bulk_filter(filters, by)
        return self._drive(lambda: control.cancel_many(self._engine, found))

    def count_matching(self, filters: RunFilter | None = None, **by: Any) -> int:
        """How many runs ``retry_many`` or ``cancel_many`` would take."""
        found = run_filter(filters, by)
        return self._drive(lambda: control.count_matching(self._engine, found), repeatable=True)

    def wait_for_run(
        self,
        run_id: int,
        *,
        timeout: float | None = None,
        poll_interval: float = POLL_INTERVAL_S,
    ) -> Run:
        """Wait until the run is final (COMPLETED, FAILED, ...) and return it. Wakes on the
        notification that the run ended (a second connection of the client LISTENs on the
        finished channel), re-reading the run otherwise only every ``poll_interval`` seconds as
        a fallback. Raises ``RunWaitTimeoutError`` (a ``TimeoutError``) after ``timeout``
        seconds, ``RunNotFoundError`` for an unknown id. Many callers may wait at once. A
        client made with ``listen=False`` (PgBouncer in transaction mode) only polls."""
        run = self.get_run(run_id)
        if run.status.is_final:
            return run
        deadline = math.inf if timeout is None else time.monotonic() + max(timeout, 0.0)
        if not self.listen:
            return self._poll_until_final(run, deadline, timeout, poll_interval)
        watcher = self._run_watcher()
        try:
            watcher.start()
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
                    run = self.get_run(run_id)
                else:
                    run = self._watch(run_id)
                    watched = True
                if run.status.is_final:
                    return run
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RunWaitTimeoutError(run_id, timeout or 0.0, run.status.value)
                watcher.wait(event, min(left, poll_interval))
            finally:
                watcher.unregister(run_id, event)

    def _run_watcher(self) -> RunWatcher:
        """The client's one run watcher, made by the first wait."""
        with self._watcher_lock:
            if self._watcher is None:
                watched_dsn = watch_dsn(self.dsn, self._pool.conninfo)
                listening = self.options.kwargs(watched_dsn)
                self._watcher = RunWatcher(watched_dsn, self.schema, listening)
            return self._watcher

    def _poll_until_final(
        self, run: Run, deadline: float, waited: float | None, poll_interval: float
    ) -> Run:
        while not run.status.is_final:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunWaitTimeoutError(run.id, waited or 0.0, run.status.value)
            time.sleep(min(left, poll_interval))
            run = self.get_run(run.id)
        return run

    def _watch(self, run_id: int) -> Run:
        def watch(conn: Conn) -> Run:
            with conn.transaction():
                return drive(conn, control.watch_run(self._engine, run_id))

        return self._call(watch, repeatable=True)

    def count_by_status(self) -> dict[str, int]:
        return self._drive(lambda: control.count_by_status(self._engine), repeatable=True)

    # -- acting on runs ---------------------------------------------------------------------

    def cancel(self, run_id: int) -> CancelResult:
        """End a run CANCELED, with every descendant still going; a no-op on a final run.

        A QUEUED or DELAYED run ends at once. An EXECUTING one ends at once too, and its worker
        is told to cancel the handler, whose outcome the lease fence then refuses.
        """
        return self._drive(lambda: control.cancel(self._engine, run_id))

    def reschedule(self, run_id: int, delay: Duration | datetime) -> Run:
        """Move a DELAYED run's start to ``delay`` from now, or to an aware datetime.

        Raises ``RunNotDelayedError`` when the run is not DELAYED (it started or ended)."""
        return self._drive(lambda: control.reschedule(self._engine, run_id, delay), repeatable=True)

    def retry(self, run_id: int) -> Run:
        """Requeue a run that ended FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE with
        one more attempt (sql/runs/control.sql). Raises ``RunNotRetryableError`` for other
        statuses and ``QueueSizeLimitExceeded`` when its queue is full."""
        return self._drive(lambda: control.retry(self._engine, run_id))

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client's own pool (a caller's pool is left open), its run watcher and its
        batches' connection."""
        if self._owns_pool and self._opened:
            self._pool.close()
        if self._watcher is not None:
            self._watcher.close()
        self.batches.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
