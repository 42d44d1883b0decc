"""The worker: claims runs in batches, executes them, keeps their leases, writes outcomes.

Loops, each on its own connection: the claimer (this file), the outcome writer, the
heartbeater, the notification listener and the periodic-job runner. Claimed runs go to a
fixed pool of ``concurrency`` runner tasks (worker/runners.py), so a run costs no task of its
own. Every held run's state and the slots they take are the run table's (worker/runs.py): the
runners, the heartbeater, the writer, the wait service and the listener report events to it,
and this file only wires them together and claims into the slots it has free. Shutdown stops
the claimer first, gives running handlers ``shutdown_grace`` seconds, cancels what is left and
hands those runs back to QUEUED without counting the attempt.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import psycopg
from anyio.abc import TaskStatus
from psycopg.conninfo import conninfo_to_dict

from fairlane import schedules, tracing
from fairlane.batches import processing as batch_processing
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.connection import (
    DEFAULT_PREPARE_THRESHOLD,
    DEFAULT_STATEMENT_TIMEOUT,
    ConnectionOptions,
    Outage,
    check_dsn,
    connect_failure,
    connect_timeout_for,
)
from fairlane.engine import engine, rows_async
from fairlane.engine.journal import RecordedCall
from fairlane.errors import ConfigurationError, SchemaMismatchError
from fairlane.metrics.worker import WorkerMetrics
from fairlane.models import ClaimedRun
from fairlane.schema.check import SCHEMA_REVISION, check_schema_async
from fairlane.worker import heartbeat, notifier, periodic
from fairlane.worker.announcements import Announcements
from fairlane.worker.claim_floors import ClaimFloors
from fairlane.worker.connections import LoopConnection
from fairlane.worker.context import RunContext
from fairlane.worker.lease_store import Lease, LeaseStore
from fairlane.worker.outcomes import OutcomeWriter
from fairlane.worker.presence import Presence, stale_after
from fairlane.worker.primitives import GENERIC, Primitives, of_running_backend
from fairlane.worker.registry import TaskRegistry
from fairlane.worker.run_state import STOP_SHUTDOWN, ActiveRun
from fairlane.worker.runners import RunnerPool
from fairlane.worker.runs import RunTable
from fairlane.worker.signals import TestSignals
from fairlane.worker.stats import WorkerStats
from fairlane.worker.waiting import WaitService

log = logging.getLogger("fairlane.worker")

# The connections that write a worker's fenced statements (sql/leases/) never plan a scan of a
# table: each statement finds its runs by primary key, and the plan PostgreSQL keeps for a
# prepared statement, made from the table as it was (nearly empty, when the worker started
# first), could otherwise scan the whole runs table for every lease once it has grown. And they
# keep that one plan: left to choose, PostgreSQL planned every call anew for good (a custom plan
# counts the elements of the call's arrays, so it always looks cheaper than the generic plan's
# guess), at a cost in server time for every completion, failure and heartbeat
# (bench/sittings/14-fenced-writes-on-one-plan-a-pickup-on-a-cold-box.md).
FENCED_WRITE_SETTINGS = {"enable_seqscan": "off", "plan_cache_mode": "force_generic_plan"}

# Start-up retries of an unreachable database: the first after this, doubling up to the cap.
START_RETRY_MIN_S = 0.25
START_RETRY_MAX_S = 10.0


class Worker:
    def __init__(
        self,
        registry: TaskRegistry,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        concurrency: int = 10,
        claim_batch: int | None = None,
        lease_seconds: float = 30.0,
        heartbeat_interval: float | None = None,
        poll_interval: float = 1.0,
        listen: bool = True,
        shutdown_grace: float = 30.0,
        environments: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        run_periodic_jobs: bool = True,
        periodic_interval: float = 0.25,
        batch_connections: int = batch_processing.BATCH_CONNECTIONS,
        metadata_interval: float = 0.5,
        connect_timeout: float | None = None,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        heartbeat_timeout: float | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        durable_claims: bool = True,
        wait_in_memory_s: float = 2.0,
    ) -> None:
        if wait_in_memory_s < 0:
            raise ConfigurationError("wait_in_memory_s must not be negative")
        if concurrency < 1 or lease_seconds <= 0 or poll_interval <= 0 or batch_connections < 1:
            raise ConfigurationError(
                "concurrency, lease_seconds, poll_interval and batch_connections must be positive"
            )
        self.registry = registry
        # A malformed DSN is refused here, in one line, before anything starts.
        self.dsn = check_dsn(psycopg_dsn(database_url(dsn)))
        self.schema = schema_name(schema)
        heartbeat_interval = heartbeat_interval or lease_seconds / 3
        self.connection_options = ConnectionOptions(
            connect_timeout=connect_timeout_for(self.dsn, connect_timeout),
            statement_timeout=statement_timeout,
            lock_timeout=None,
            application_name="fairlane worker",
            prepare_threshold=prepare_threshold,
        )
        # A beat that takes longer than an interval is better abandoned and sent again on a
        # new connection while the leases still hold; never less than a second, though.
        self.heartbeat_timeout = heartbeat_timeout or min(
            statement_timeout, max(heartbeat_interval, 1.0)
        )
        self.connection_options.with_(statement_timeout=self.heartbeat_timeout)  # checks it
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stats = WorkerStats()
        # Its own Prometheus series (fairlane.metrics.serve_worker_metrics serves them).
        self.metrics = WorkerMetrics(self.stats, self.worker_id)
        # Batch items become runs through the built-in task fairlane.batch_item.
        batch_processing.install(registry)
        self.batch_items = batch_processing.BatchItemProcessor(
            self.dsn,
            self.schema,
            max_connections=batch_connections,
            options=self._options("batches"),
            on_item=self.metrics.batch_item,
        )
        self.concurrency = concurrency
        self.claim_batch = claim_batch or concurrency
        self.poll_interval = poll_interval
        self.listen = listen
        # A claim committed without waiting for the WAL flush is lost in a server crash while
        # its handler already runs: the run is QUEUED again and runs twice. Opt-in speed only.
        self._claim_settings: dict[str, str] = (
            {} if durable_claims else {"synchronous_commit": "off"}
        )
        self.shutdown_grace = shutdown_grace
        self.environments = list(environments) if environments else None
        # Batch carriers are served whatever the queue filter: every batch of the environments
        # this worker serves gets processed, whichever queues its items go to.
        self.queues = batch_processing.with_batch_queue(queues) if queues else None
        self.run_periodic_jobs = run_periodic_jobs
        self.periodic_interval = periodic_interval
        self.store = LeaseStore(self.schema, lease_seconds=lease_seconds, worker_id=self.worker_id)
        # Every held run's state and the slot accounting (worker/runs.py): the components
        # below report their events to it.
        self.runs = RunTable(concurrency, self.stats, on_written=self._outcomes_written)
        # Its row in the workers registry, kept by the heartbeat (worker/presence.py).
        self.presence = Presence(
            self.schema,
            self.worker_id,
            tasks=registry.names(),
            environments=self.environments,
            queues=self.queues,
            concurrency=concurrency,
            stale_after_s=stale_after(lease_seconds, heartbeat_interval),
        )
        self.heartbeater = heartbeat.Heartbeater(
            self.store,
            self.runs,
            interval=heartbeat_interval,
            presence=self.presence,
            # One whole write attempt, the abandoning of a hung connection included.
            outcome_timeout=self.connection_options.answer_within or lease_seconds,
        )
        self.writer = OutcomeWriter(
            self.store,
            self.stats,
            self.runs.written,
            metadata_interval=metadata_interval,
            metrics=self.metrics,
        )
        self.waits = WaitService(
            self.dsn,
            self.schema,
            poll_interval=poll_interval,
            options=self._options("waits"),
            runs=self.runs,
            keep_in_memory_s=wait_in_memory_s,
        )
        self.pool = RunnerPool(self.runs, registry, self.writer, self.metrics, concurrency)
        self.runs.on_runner_needed = self.pool.add_runner
        self._wake = anyio.Event()
        # Environments announced to have new work since the last claim, and whether a full
        # scan is owed (at start: work may have been announced before the worker listened).
        self._announced = Announcements()
        self._announced.scan_owed = True
        self._last_full_scan = -math.inf
        # Where the next claim starts walking each queue (while claims come back full).
        self._floors = ClaimFloors()
        self._stopping = False
        self._stop_event = anyio.Event()
        # stop(skip_grace=True): the grace period is over, or ends now if it has begun.
        self._grace_skipped = False
        self._grace: anyio.CancelScope | None = None
        self._started = threading.Event()
        self._token: anyio.lowlevel.EventLoopToken | None = None
        # The events and scopes made per run: the backend's own classes once the loop runs.
        self._primitives: Primitives = GENERIC
        self._thread: int | None = None
        # Raised by run() after a graceful stop: the schema changed under the worker.
        self._fatal: SchemaMismatchError | None = None
        # run_until_idle: stop once nothing is due.
        self._burst = False
        self._nothing_was_due = False
        # Each loop's connection, by loop name, while the worker runs (for tests and
        # diagnostics): claim, heartbeat, writer, listener, periodic.
        self.connections: dict[str, LoopConnection] = {}

    def _options(self, loop: str, **changes: Any) -> ConnectionOptions:
        """The connection options of one loop: the worker's, named after the loop (its
        application_name, as pg_stat_activity shows it)."""
        return self.connection_options.with_(application_name=f"fairlane {loop}", **changes)

    def _loop_connection(self, loop: str, **changes: Any) -> LoopConnection:
        connection = LoopConnection(self.dsn, self._options(loop, **changes))
        self.connections[loop] = connection
        return connection

    # -- control ------------------------------------------------------------------------

    def stop(self, *, skip_grace: bool = False) -> None:
        """Ask for a graceful shutdown. Safe from any thread, and from a signal handler.

        ``skip_grace``: give running handlers no more time; they are stopped and their runs
        handed back at once, also when a shutdown asked for before is already in its grace
        period (what a second SIGTERM or SIGINT does to ``fairlane worker``)."""
        if self._token is not None and threading.get_ident() != self._thread:
            anyio.from_thread.run_sync(self._request_stop, skip_grace, token=self._token)
        else:
            self._request_stop(skip_grace)

    def _request_stop(self, skip_grace: bool = False) -> None:
        if skip_grace:
            self._grace_skipped = True
            if self._grace is not None:
                self._grace.cancel()
        self._stopping = True
        self.presence.stopping = True
        self._stop_event.set()
        self._wake.set()
        self.runs.wake_slot_waiters()

    @property
    def held(self) -> dict[int, ActiveRun]:
        """The runs this worker holds, by id (the run table's)."""
        return self.runs.held

    @property
    def signals(self) -> TestSignals | None:
        return self.runs.signals

    def enable_test_signals(self) -> TestSignals:
        """Turn on the test signals (fairlane.worker.signals) and return them: events of the
        runs' state machine a test awaits instead of sleeping. Call before ``run``."""
        if self.runs.signals is None:
            self.runs.signals = TestSignals()
        return self.runs.signals

    def wait_started(self, timeout: float | None = None) -> bool:
        """For threads that started ``run`` elsewhere: block until the worker claims."""
        return self._started.wait(timeout)

    # -- run ----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until ``stop()``. Cancelling the caller is a graceful stop too: the worker stops
        claiming, gives handlers ``shutdown_grace``, hands the rest back, then lets the
        cancellation through. (The shutdown runs shielded, so a cancellation cannot cut short
        the writes that hand runs back.)"""
        self._token = anyio.lowlevel.current_token()
        self._primitives = self.runs.primitives = of_running_backend()
        self._thread = threading.get_ident()
        # The schema is checked when the claim connection opens: here, before anything starts,
        # and again whenever it reconnects.
        claim_conn = LoopConnection(
            self.dsn,
            self._options("claim", settings=self._claim_settings),
            on_connect=self._check,
        )
        self.connections["claim"] = claim_conn
        if not await self._connect_at_start(claim_conn):
            await claim_conn.close()
            return  # stopped before the database answered
        async with anyio.create_task_group() as group:
            try:
                await group.start(self._run_shielded, claim_conn)
                task_status.started()
                await self._stop_event.wait()
            finally:
                self._request_stop()
        if self._fatal is not None:
            raise self._fatal

    async def run_until_idle(self) -> WorkerStats:
        """Run until nothing is due, then stop gracefully and return the counters (burst mode,
        ``fairlane worker --burst``; for tests and batch jobs).

        Idle means: a claim over every environment and queue the worker serves found nothing,
        the worker holds no run (every handler has returned and its outcome is written; a
        handler waiting on children or a time keeps it going), and no DELAYED run there is due
        already (the periodic jobs queue those first). A run not due yet, a delay or a retry's
        backoff still to run, is left DELAYED; one the caps or a pause keep from being claimed
        is left QUEUED.
        """
        self._burst = True
        try:
            await self.run()
        finally:
            self._burst = False
        return self.stats

    async def _nothing_due(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """In burst mode, after a full claim found nothing: whether there is nothing left."""
        if self.held or self.writer.has_pending:
            return False
        if not self.run_periodic_jobs:
            return True  # promotion is someone else's: due DELAYED runs are not ours to wait for
        return not await self.store.due_delayed(
            conn, environments=self.environments, queues=self.queues, tasks=self.registry.names()
        )

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await check_schema_async(conn, self.schema)

    async def _connect_at_start(self, connection: LoopConnection) -> bool:
        """Open the claim connection (and check the schema) before anything starts. An outage
        is retried with capped backoff until the database answers or the worker is stopped
        (then False), logged once when it starts and once when it ends. What waiting cannot
        cure is raised at once: a malformed DSN or refused login (``ConfigurationError``), a
        missing database or a schema that is not this fairlane's (``SchemaMismatchError``)."""
        outage = Outage("start-up", log)
        delay = START_RETRY_MIN_S
        while not self._stopping:
            try:
                await connection.get()
            except psycopg.Error as error:
                fatal = connect_failure(error, SCHEMA_REVISION)
                if fatal is not None:
                    raise fatal from None
                outage.failed(error)
            else:
                outage.recovered()
                return True
            with anyio.move_on_after(delay):
                await self._stop_event.wait()
            delay = min(delay * 2, START_RETRY_MAX_S)
        return False

    async def _run_shielded(
        self, claim_conn: LoopConnection, *, task_status: TaskStatus[None]
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self._run(claim_conn, task_status=task_status)

    async def _run(self, claim_conn: LoopConnection, *, task_status: TaskStatus[None]) -> None:
        # Runner tasks started below inherit it: the batch item handler finds its worker.
        batch_processing.current_processor.set(self.batch_items)
        fenced = {**self.connection_options.settings, **FENCED_WRITE_SETTINGS}
        beat_conn = self._loop_connection(
            "heartbeat", statement_timeout=self.heartbeat_timeout, settings=fenced
        )
        write_conn = self._loop_connection("writer", settings=fenced)
        listen_conn = self._loop_connection("listener")
        tick_conn = self._loop_connection("periodic")
        listeners = notifier.Listeners(
            new_runs=self._notified,
            cancel=self.runs.cancel_requested,
            resume=self.waits.resume,
            reconnected=self.waits.wake_all,
        )
        try:
            # Registered before the first claim; a failure is tried again every beat.
            await self.presence.tick(beat_conn)
            async with anyio.create_task_group() as background:
                background.start_soon(self._write_loop, write_conn)
                background.start_soon(self.heartbeater.run, beat_conn)
                if self.listen:
                    background.start_soon(notifier.listen, listen_conn, self.schema, listeners)
                if self.run_periodic_jobs:
                    background.start_soon(self._periodic_loop, tick_conn)
                async with anyio.create_task_group() as runners:
                    self.pool.start(runners, self._primitives)
                    self._started.set()
                    task_status.started()
                    self._log_start()
                    await self._claim_loop(claim_conn)
                    await self._drain()
                    # Every run has finished; the runners wait on an empty queue.
                    runners.cancel_scope.cancel()
                await self._flush_outcomes(write_conn)
                background.cancel_scope.cancel()
        finally:
            if self.presence.registered:
                await self.presence.leave(beat_conn)
            for conn in (claim_conn, beat_conn, write_conn, listen_conn, tick_conn):
                await conn.close()
            await self.waits.close()
            await self.batch_items.close()
            log.info("worker %s stopped: %s", self.worker_id, self.stats.as_dict())

    async def _claim_loop(self, connection: LoopConnection) -> None:
        outage = Outage("claim", log)
        while not self._stopping:
            free = self.runs.free
            if free <= 0:
                await self.runs.slot_freed()
                continue
            asked = min(free, self.claim_batch)
            self._wake = anyio.Event()
            # The database starts each lease when the claim runs: never count ours from later.
            sent_at = time.monotonic()
            full_scan = self._full_scan_due(sent_at)
            announced = self._announced.take(full_scan)
            try:
                async with connection.use() as conn:
                    began = time.perf_counter()
                    claimed = await self.store.claim(
                        conn,
                        asked,
                        environments=self.environments,
                        queues=self.queues,
                        full_scan=full_scan,
                        floors=self._floors.for_claim(full_scan, announced),
                        # Only runs of the tasks registered (the built-in batch carrier task
                        # included): a run of another task waits QUEUED for a worker that has
                        # its handler, instead of failing here (sql/claim/claim.sql).
                        tasks=self.registry.names(),
                        announced=announced,
                    )
                    self.metrics.claimed(time.perf_counter() - began)
                self._floors.claimed(claimed, asked, full_scan)
                outage.recovered()
            except SchemaMismatchError as mismatch:
                # Migrated under us while we were disconnected: stop, and say why.
                log.error("stopping: %s", mismatch)
                self._fatal = mismatch
                self._request_stop()
                break
            except psycopg.Error as error:
                # Retried after the poll interval; logged once per outage.
                outage.failed(error)
                await connection.discard()
                claimed = []
                # The scan this claim was to make is still owed.
                self._announced.scan_owed |= full_scan
                self._announced.give_back(announced)
            self.stats.claims += 1
            self.stats.claimed += len(claimed)
            recording = tracing.tracer() if claimed else None
            replays = await self._recorded_calls(connection, claimed)
            for run in claimed:
                self._start(run, sent_at, recording, replays)
            if self._burst and full_scan:
                # Stop after a claim that found nothing following a check that nothing was
                # due: a run the promotion job queued before the check is seen by the claim.
                if claimed or not await self._burst_done(connection):
                    self._nothing_was_due = False
                elif self._nothing_was_due:
                    log.info("worker %s: nothing is due; stopping (burst)", self.worker_id)
                    self._request_stop()
                    break
                else:
                    self._nothing_was_due = True
                    continue
            if len(claimed) < asked and not self._stopping:
                with anyio.move_on_after(self.poll_interval):
                    await self._wake.wait()

    async def _burst_done(self, connection: LoopConnection) -> bool:
        try:
            return await self._nothing_due(await connection.get())
        except psycopg.Error:
            log.warning("burst: the idle check failed; trying again", exc_info=True)
            await connection.discard()
            return False

    def _full_scan_due(self, now: float) -> bool:
        """Whether this claim should look for every environment that gained work: when a
        scan is owed (at start, after a reconnect, when too many environments were announced
        to send), without notifications, and at least once per poll interval as a safety net.
        Between those, claims serve the environments known to have work and look at the ones
        notifications named (worker/announcements.py), and still look for others whenever
        those cannot fill them."""
        due = (
            self._announced.scan_owed
            or not self.listen
            # In burst mode every claim made while nothing is held decides whether to stop.
            or (self._burst and not self.held)
            or now - self._last_full_scan >= (self.poll_interval)
        )
        if due:
            self._last_full_scan = now
        return due

    async def _recorded_calls(
        self, connection: LoopConnection, claimed: list[ClaimedRun]
    ) -> dict[int, list[RecordedCall]] | None:
        """The recorded calls of the claimed runs that have some, read for the whole claim at
        once; None when that failed (each replay then reads its own)."""
        ids = [run.id for run in claimed if run.replay]
        if not ids:
            return {}
        try:
            async with connection.use() as conn:
                calls = await rows_async(conn, engine(self.schema).journal.recorded_calls(ids))
        except psycopg.Error:
            log.warning("reading the recorded calls of %d runs failed", len(ids), exc_info=True)
            await connection.discard()
            return None
        found: dict[int, list[RecordedCall]] = {run_id: [] for run_id in ids}
        for call in calls:
            found[call.run_id].append(call)
        return found

    def _start(
        self,
        run: ClaimedRun,
        sent_at: float,
        recording: Any,
        replays: dict[int, list[RecordedCall]] | None = None,
    ) -> None:
        ctx = RunContext(
            run=run,
            worker_id=self.worker_id,
            _waits=self.waits,
            _metadata_sink=self._metadata_changed,
        )
        active = ActiveRun(
            run=run,
            lease=Lease(run.id, run.lease_token),
            ctx=ctx,
            confirmed_until=sent_at + self.store.lease_seconds,
            tracer=recording,
        )
        ctx._active = active
        if run.replay and replays is not None:
            self.waits.attach_replay(active, replays.get(run.id, []))
        self.runs.claimed(active)
        self.pool.put(active)

    async def _drain(self) -> None:
        """Let running handlers finish within the grace period, then cancel the rest."""
        if self.runs.running and not self._grace_skipped:
            log.info(
                "worker %s: %d runs still held get up to %g s (shutdown_grace) to finish",
                self.worker_id,
                self.runs.running,
                self.shutdown_grace,
            )
            # A scope stop(skip_grace=True) can cancel: the timer is running by then.
            with anyio.move_on_after(self.shutdown_grace) as self._grace:
                await self.runs.until_idle()
            self._grace = None
        self.runs.stop_all(STOP_SHUTDOWN)
        # Cancelled async handlers return at once; abandoned sync ones do not hold us up. The
        # outcomes still unwritten are flushed next, within a bound.
        await self.runs.until_handlers_settled()

    async def _flush_outcomes(self, connection: LoopConnection) -> None:
        """Write what is left at shutdown; give up after one connect and statement timeout
        (the leases of what was not written lapse, and those runs are run again)."""
        options = self.connection_options
        give_up_at = time.monotonic() + options.connect_timeout + (options.answer_within or 0)
        with anyio.CancelScope(shield=True):
            # The last metadata handlers set is written even with no outcome to go with it.
            if self.writer.has_metadata:
                await self.writer.flush(await connection.get())
            while self.writer.has_pending:
                try:
                    async with connection.use() as conn:
                        await self.writer.flush(conn)
                except psycopg.Error as error:
                    await connection.discard()
                    if time.monotonic() >= give_up_at:
                        log.error(
                            "stopping with %d outcomes unwritten (%s): their leases lapse and "
                            "the runs are run again",
                            self.writer.pending_count,
                            error,
                        )
                        return
                    await anyio.sleep(0.5)

    async def _periodic_loop(self, connection: LoopConnection) -> None:
        await periodic.periodic_loop(
            connection,
            self.schema,
            self.stats,
            interval=self.periodic_interval,
            declared=schedules.declared_params(self.registry),
            metrics=self.metrics,
        )

    async def _write_loop(self, connection: LoopConnection) -> None:
        outage = Outage("writer", log)
        while True:
            try:
                await self.writer.run(connection, on_written=outage.recovered)
            except psycopg.Error as error:
                outage.failed(error)
                await connection.discard()
                await anyio.sleep(0.5)

    def _log_start(self) -> None:
        server = conninfo_to_dict(self.dsn)
        fields = {
            "worker_id": self.worker_id,
            "tasks": [name for name in self.registry.names() if not name.startswith("fairlane.")],
            "environments": list(self.environments or []) or "all",
            "queues": list(self.queues or []) or "all",
            "concurrency": self.concurrency,
            "lease_seconds": self.store.lease_seconds,
            # Never the password: host, port and database only.
            "server": f"{server.get('host', 'local')}:{server.get('port', 5432)}"
            f"/{server.get('dbname', '')}",
            "schema": self.schema,
            "schema_revision": SCHEMA_REVISION,
        }
        log.info(
            "worker %s started: tasks %s, environments %s, queues %s, concurrency %s, "
            "lease %ss, server %s, schema %s at %s",
            *fields.values(),
            extra=fields,
        )

    # -- what the listener, handlers and writer tell the claimer ------------------------

    def _notified(self, environment: str) -> None:
        if (
            environment == notifier.ANY_ENVIRONMENT
            or self.environments is None
            or environment in self.environments
        ):
            self.stats.wakeups += 1
            self._announced.heard(environment)
            self._wake.set()

    def _metadata_changed(self, ctx: RunContext) -> None:
        """A handler set metadata: hand the run to the writer, on the event loop (a sync
        handler calls from its thread)."""
        active = ctx._active
        if active is None:
            return
        if self._token is None or threading.get_ident() == self._thread:
            self.writer.metadata_changed(active.lease, ctx)
            return
        try:
            anyio.from_thread.run_sync(
                self.writer.metadata_changed, active.lease, ctx, token=self._token
            )
        except RuntimeError:
            # The worker's loop has ended (an abandoned sync handler): nothing is written.
            log.debug("run %s: metadata set after the worker stopped", ctx.run_id)

    def _outcomes_written(self) -> None:
        # Written outcomes free database slots: a claim that came back short because of a cap
        # tries again now instead of sleeping out its poll interval.
        self._wake.set()


def run_forever(worker: Worker, **kwargs: Any) -> None:
    """Run ``worker`` on a fresh asyncio loop until it stops (sync entry point)."""
    anyio.run(worker.run, **kwargs)


__all__ = ["Worker", "run_forever"]
