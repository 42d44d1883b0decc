"""The sync client: trigger runs, read them back and act on them from sync code (a WSGI view,
a script, a thread). ``AsyncClient`` (fairlane.async_client) is its async twin, method for
method.

A client owns one connection, opened on first use, used one call at a time (a lock), in
autocommit: every call is committed on return. A new connection is checked first: a database
whose schema is not this fairlane's raises ``SchemaMismatchError``. To trigger inside your own
transaction, use ``fairlane.trigger`` with your connection or session instead.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import psycopg

from fairlane import control
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.control import BulkResult, CancelResult, RunFilter
from fairlane.durations import Duration
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive
from fairlane.engine.waits import WaitsOn
from fairlane.errors import ConfigurationError, RunWaitTimeoutError
from fairlane.models import Run
from fairlane.schema.check import check_schema
from fairlane.triggering import api as triggering
from fairlane.triggering.request import TriggerRequest
from fairlane.watching import POLL_INTERVAL_S, RunWatcher

T = TypeVar("T")


def run_filter(filters: RunFilter | None, by: dict[str, Any]) -> RunFilter:
    if filters is not None and by:
        raise ConfigurationError("pass a RunFilter or filter keywords, not both")
    return filters or RunFilter(**by)


def bulk_filter(filters: RunFilter | None, by: dict[str, Any]) -> RunFilter:
    """A bulk action's filter; an empty one would take every run, so it must say ``all=True``."""
    take_all = bool(by.pop("all", False))
    chosen = run_filter(filters, by)
    if chosen.is_empty and not take_all:
        raise ConfigurationError("a bulk action needs a filter, or all=True for every run")
    return chosen


class Client:
    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        self._engine = engine(self.schema)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._watcher: RunWatcher | None = None
        self._watcher_lock = threading.Lock()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            conn = psycopg.Connection.connect(self.dsn, autocommit=True)
            try:
                check_schema(conn, self.schema)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _drive(self, operation: Operation[T]) -> T:
        with self._lock:
            return drive(self._connection(), operation)

    # -- triggering -------------------------------------------------------------------------

    def trigger(self, task: str, payload: Any = None, **options: Any) -> int:
        """Create a run (committed on return); returns its id.

        ``options`` are ``TriggerRequest``'s: delay, ttl, idempotency_key (+ idempotency_scope,
        idempotency_ttl, parent_run_id, parent_attempt), debounce=Debounce(...), priority,
        queue, environment, max_attempts, max_duration, tags, metadata, machine. With an
        idempotency key or debounce the id may be an existing run's.
        """
        return self.trigger_many([TriggerRequest(task, payload, **options)])[0]

    def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]:
        """Create many runs in one statement, all or none; returns ids in request order."""
        with self._lock:
            return triggering.trigger_many(self._connection(), requests, schema=self.schema)

    def create_failed_run(
        self, task: str, payload: Any = None, *, code: str, message: str, **options: Any
    ) -> int:
        """Create a run that has already ended SYSTEM_FAILURE with ``code`` (for instance
        ``PAYLOAD_TOO_LARGE``): it never runs, and whatever waits on it sees it final.
        ``options``: environment, queue, parent_run_id, tags, metadata, machine."""
        params = control.failed_run_params(task, payload, code=code, message=message, **options)
        return self._drive(control.create_failed_run(self._engine, params))

    # -- reading ----------------------------------------------------------------------------

    def get_run(self, run_id: int) -> Run:
        """Raises ``RunNotFoundError`` for an unknown id."""
        return self._drive(control.get_run(self._engine, run_id))

    def list_runs(self, filters: RunFilter | None = None, **by: Any) -> list[Run]:
        """Runs newest first, filtered by environment, queue, task, status, tags (all
        optional): pass a ``RunFilter`` or its fields as keywords."""
        return self._drive(control.list_runs(self._engine, run_filter(filters, by)))

    def waits_on(self, run_id: int) -> list[WaitsOn]:
        """What a run waits on (a WAITING run's children, times, tokens, batch)."""
        return self._drive(control.waits_on(self._engine, run_id))

    def retry_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Retry every matching run that ended badly, 1,000 per statement (each its own
        transaction), newest first; refuses an empty filter (pass ``RunFilter`` fields)."""
        return self._drive(control.retry_many(self._engine, bulk_filter(filters, by)))

    def cancel_many(self, filters: RunFilter | None = None, **by: Any) -> BulkResult:
        """Cancel every matching run still going, with its descendants, 1,000 per statement."""
        return self._drive(control.cancel_many(self._engine, bulk_filter(filters, by)))

    def count_matching(self, filters: RunFilter | None = None, **by: Any) -> int:
        """How many runs ``retry_many`` or ``cancel_many`` would take."""
        return self._drive(control.count_matching(self._engine, run_filter(filters, by)))

    def wait_for_run(
        self, run_id: int, *, timeout: float | None = None,
        poll_interval: float = POLL_INTERVAL_S,
    ) -> Run:  # fmt: skip
        """Wait until the run is final (COMPLETED, FAILED, ...) and return it. Wakes on the
        notification that the run ended (a second connection of the client LISTENs on the
        finished channel), re-reading the run otherwise only every ``poll_interval`` seconds as
        a fallback. Raises ``RunWaitTimeoutError`` (a ``TimeoutError``) after ``timeout``
        seconds, ``RunNotFoundError`` for an unknown id. Threads may wait at once."""
        run = self.get_run(run_id)
        if run.status.is_final:
            return run
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = RunWatcher(self.dsn, self.schema)
            watcher = self._watcher
        watcher.start()
        deadline = math.inf if timeout is None else time.monotonic() + max(timeout, 0.0)
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

    def _watch(self, run_id: int) -> Run:
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                return drive(conn, control.watch_run(self._engine, run_id))

    def count_by_status(self) -> dict[str, int]:
        return self._drive(control.count_by_status(self._engine))

    # -- acting on runs ---------------------------------------------------------------------

    def cancel(self, run_id: int) -> CancelResult:
        """End a run CANCELED, with every descendant still going; a no-op on a final run.

        A QUEUED or DELAYED run ends at once. An EXECUTING one ends at once too, and its worker
        is told to cancel the handler, whose outcome the lease fence then refuses.
        """
        return self._drive(control.cancel(self._engine, run_id))

    def reschedule(self, run_id: int, delay: Duration | datetime) -> Run:
        """Move a DELAYED run's start to ``delay`` from now, or to an aware datetime.

        Raises ``RunNotDelayedError`` when the run is not DELAYED (it started or ended)."""
        return self._drive(control.reschedule(self._engine, run_id, delay))

    def retry(self, run_id: int) -> Run:
        """Requeue a run that ended FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE with
        one more attempt (sql/runs/control.sql). Raises ``RunNotRetryableError`` for other
        statuses and ``QueueSizeLimitExceeded`` when its queue is full."""
        return self._drive(control.retry(self._engine, run_id))

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._watcher is not None:
            self._watcher.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()
