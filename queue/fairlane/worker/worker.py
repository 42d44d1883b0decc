"""The worker: claims runs in batches, executes them, keeps their leases, writes outcomes.

Loops, each on its own connection: the claimer (this file), the outcome writer, the
heartbeater, the notification listener and the periodic-job runner. Claimed runs go to a
fixed pool of ``concurrency`` runner tasks, so a run costs no task of its own. Shutdown stops
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
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import psycopg
from anyio.abc import TaskGroup, TaskStatus
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
from fairlane.errors import ConfigurationError, SchemaMismatchError
from fairlane.metrics.worker import WorkerMetrics
from fairlane.models import ClaimedRun
from fairlane.schema.check import SCHEMA_REVISION, check_schema_async
from fairlane.worker import heartbeat, notifier, periodic
from fairlane.worker.claim_floors import ClaimFloors
from fairlane.worker.connections import LoopConnection
from fairlane.worker.context import RunContext
from fairlane.worker.executor import (
    STOP_CANCELED,
    STOP_LEASE_LOST,
    STOP_SHUTDOWN,
    ActiveRun,
    execute,
)
from fairlane.worker.lease_store import Lease, LeaseStore
from fairlane.worker.outcomes import OutcomeWriter
from fairlane.worker.primitives import GENERIC, Primitives, of_running_backend
from fairlane.worker.registry import TaskRegistry
from fairlane.worker.stats import WorkerStats
from fairlane.worker.waiting import WaitService

log = logging.getLogger("fairlane.worker")

# The connections that write a worker's fenced statements (sql/leases/) never plan a scan of a
# table: each statement finds its runs by primary key, and the plan PostgreSQL keeps for a
# prepared statement, made from the table as it was (nearly empty, when the worker started
# first), could otherwise scan the whole runs table for every lease once it has grown. And they
# keep that one plan: left to choose, PostgreSQL planned every call anew for good (a custom plan
# counts the elements of the call's arrays, so it always looks cheaper than the generic plan's
# guess), about 0.3 ms of the server's time for every completion, failure and heartbeat.
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
    ) -> None:
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
            statement_timeout=statement_timeout, lock_timeout=None,
            application_name="fairlane worker",
            prepare_threshold=prepare_threshold,
        )  # fmt: skip
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
            self.dsn, self.schema, max_connections=batch_connections,
            options=self._options("batches"), on_item=self.metrics.batch_item,
        )  # fmt: skip
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
        self.held: dict[int, ActiveRun] = {}
        self.heartbeater = heartbeat.Heartbeater(
            self.store, self.held, self.stats, self._lease_lost,
            interval=heartbeat_interval, on_abandoned=self._outcome_abandoned,
            # One whole write attempt, the abandoning of a hung connection included.
            outcome_timeout=self.connection_options.answer_within or lease_seconds,
        )  # fmt: skip
        self.writer = OutcomeWriter(
            self.store, self.stats, self._outcomes_written,
            metadata_interval=metadata_interval, metrics=self.metrics,
        )  # fmt: skip
        self.waits = WaitService(
            self.dsn, self.schema, poll_interval=poll_interval, options=self._options("waits"),
            release_slot=self._release_local_slot, reacquire_slot=self._reacquire_local_slot,
        )  # fmt: skip
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._ready = _ReadyQueue()
        self._runners: TaskGroup | None = None
        # Runners beyond ``concurrency``, left by handlers that waited and resumed.
        self._surplus_runners = 0
        # Slots taken: runs claimed and not finished (handed to a runner, executing, or done
        # with their outcome not yet written and no room among the unwritten ones).
        self._running = 0
        # Finished runs whose outcome waits for the writer without holding a slot: at most
        # ``concurrency`` of them, so the claim that refills a slot overlaps the write rather
        # than waiting for it, and a writer that cannot write stops the claims all the same.
        self._unwritten = 0
        # Finished runs that found no room among the unwritten ones: they keep their slot.
        self._parked: deque[ActiveRun] = deque()
        # Handlers not yet returned (what the shutdown waits for once the grace is over).
        self._executing = 0
        self._handlers_idle = anyio.Event()
        self._wake = anyio.Event()
        # New work was announced since the last full scan (or may have been: at start).
        self._work_announced = True
        self._last_full_scan = -math.inf
        # Where the next claim starts walking each queue (while claims come back full).
        self._floors = ClaimFloors()
        self._slot_free = anyio.Event()
        self._idle = anyio.Event()
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
        self._stop_event.set()
        self._wake.set()
        self._announce_free_slot()

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
        self._primitives = self._ready.primitives = of_running_backend()
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
            conn, environments=self.environments, queues=self.queues
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
            new_runs=self._notified, cancel=self._cancel_requested,
            resume=self.waits.resume, reconnected=self.waits.wake_all,
        )  # fmt: skip
        try:
            async with anyio.create_task_group() as background:
                background.start_soon(self._write_loop, write_conn)
                background.start_soon(self.heartbeater.run, beat_conn)
                if self.listen:
                    background.start_soon(notifier.listen, listen_conn, self.schema, listeners)
                if self.run_periodic_jobs:
                    background.start_soon(self._periodic_loop, tick_conn)
                async with anyio.create_task_group() as runners:
                    self._runners = runners
                    for _ in range(self.concurrency):
                        runners.start_soon(self._runner)
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
            for conn in (claim_conn, beat_conn, write_conn, listen_conn, tick_conn):
                await conn.close()
            await self.waits.close()
            await self.batch_items.close()
            log.info("worker %s stopped: %s", self.worker_id, self.stats.as_dict())

    async def _claim_loop(self, connection: LoopConnection) -> None:
        outage = Outage("claim", log)
        while not self._stopping:
            free = self.concurrency - self._running
            if free <= 0:
                await self._slot_free.wait()
                continue
            asked = min(free, self.claim_batch)
            self._wake = anyio.Event()
            # The database starts each lease when the claim runs: never count ours from later.
            sent_at = time.monotonic()
            full_scan = self._full_scan_due(sent_at)
            try:
                async with connection.use() as conn:
                    began = time.perf_counter()
                    claimed = await self.store.claim(
                        conn, asked,
                        environments=self.environments, queues=self.queues, full_scan=full_scan,
                        floors=self._floors.for_claim(full_scan),
                    )  # fmt: skip
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
                self._work_announced |= full_scan
            self.stats.claims += 1
            self.stats.claimed += len(claimed)
            recording = tracing.tracer() if claimed else None
            for run in claimed:
                self._start(run, sent_at, recording)
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
        """Whether this claim should look for environments that gained work. Notifications
        announce new work; without them, and at least once per poll interval as a safety net,
        every claim looks. Between those, claims serve the environments known to have work
        (and still look whenever those cannot fill them)."""
        due = (
            self._work_announced
            or not self.listen
            # In burst mode every claim made while nothing is held decides whether to stop.
            or (self._burst and not self.held)
            or now - self._last_full_scan >= (self.poll_interval)
        )
        if due:
            self._work_announced = False
            self._last_full_scan = now
        return due

    def _start(self, run: ClaimedRun, sent_at: float, recording: Any) -> None:
        previous = self.held.get(run.id)
        if previous is not None:
            # The database took the lease back before we noticed and we claimed the run again:
            # the earlier attempt is stale. Stop it; it must not touch the new attempt's entry.
            self._lease_lost(previous)
            if previous.handler_done:
                # Its outcome, still unwritten, will not free its slot: the entry is replaced.
                self._let_go(previous)
        lease = Lease(run.id, run.lease_token)
        ctx = RunContext(
            run=run, worker_id=self.worker_id, _waits=self.waits,
            _metadata_sink=self._metadata_changed,
        )  # fmt: skip
        confirmed_until = sent_at + self.store.lease_seconds
        active = ActiveRun(
            run=run, lease=lease, ctx=ctx, confirmed_until=confirmed_until,
            tracer=recording,
        )  # fmt: skip
        ctx._active = active
        self.held[run.id] = active
        self._running += 1
        active.slot_held = True
        self._executing += 1
        self._ready.put(active)

    async def _runner(self) -> None:
        """One of the long-lived tasks that execute handed-over runs one at a time, in one
        cancel scope until a stop cancels it (execute), then in a new one."""
        while True:
            with self._primitives.new_scope() as scope:
                if await self._run_in(scope):
                    return

    async def _run_in(self, scope: anyio.CancelScope) -> bool:
        """Execute runs until ``scope`` is cancelled; True when this runner should end."""
        while not scope.cancel_called:
            active = await self._ready.get()
            try:
                await execute(active, self.registry, self.writer, self._limiter, scope)
            finally:
                if active.ctx.stop_reason == STOP_CANCELED and active.attempt is not None:
                    # No outcome to write (the cancel ended the run), but the attempt ended.
                    self.metrics.run_finished(
                        active.attempt.task, "CANCELED", active.attempt.seconds
                    )
                self._executing -= 1
                if self._executing == 0:
                    self._handlers_idle.set()
                if not active.outcome_queued:
                    # Nothing to write (lease lost, canceled): the slot frees now.
                    self._free_slot(active)
                    self._forget(active)
                else:
                    self._await_write(active)
            # An idle runner holds no finished run (nor its payload and result).
            del active
            if self._surplus_runners > 0:
                # A handler that waited has resumed on its own runner: the pool shrinks back.
                self._surplus_runners -= 1
                return True
        return False

    async def _drain(self) -> None:
        """Let running handlers finish within the grace period, then cancel the rest."""
        if self._running and not self._grace_skipped:
            log.info(
                "worker %s: %d runs still held get up to %g s (shutdown_grace) to finish",
                self.worker_id,
                self._running,
                self.shutdown_grace,
            )
            self._idle = anyio.Event()
            # A scope stop(skip_grace=True) can cancel: the timer is running by then.
            with anyio.move_on_after(self.shutdown_grace) as self._grace:
                await self._idle.wait()
            self._grace = None
        for active in list(self.held.values()):
            if not active.handler_done:
                active.stop(STOP_SHUTDOWN)
        # Cancelled async handlers return at once; abandoned sync ones do not hold us up. The
        # outcomes still unwritten are flushed next, within a bound.
        while self._executing:
            self._handlers_idle = anyio.Event()
            await self._handlers_idle.wait()

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
                            "the runs are run again", self.writer.pending_count, error,
                        )  # fmt: skip
                        return
                    await anyio.sleep(0.5)

    async def _periodic_loop(self, connection: LoopConnection) -> None:
        await periodic.periodic_loop(
            connection, self.schema, self.stats, interval=self.periodic_interval,
            declared=schedules.declared_params(self.registry), metrics=self.metrics,
        )  # fmt: skip

    async def _write_loop(self, connection: LoopConnection) -> None:
        outage = Outage("writer", log)
        while True:
            try:
                await self.writer.run(connection, on_written=outage.recovered)
            except psycopg.Error as error:
                outage.failed(error)
                await connection.discard()
                await anyio.sleep(0.5)

    def _await_write(self, active: ActiveRun) -> None:
        """The handler returned and its outcome went to the writer: the slot frees now if
        there is room among the unwritten outcomes, else when the outcome is written."""
        if self._unwritten < self.concurrency:
            self._unwritten += 1
            active.unwritten = True
            self._free_slot(active)
        else:
            self._parked.append(active)

    def _let_go(self, active: ActiveRun) -> None:
        """The run's outcome is written, refused or given up on: it holds nothing any more,
        and a parked run takes its room among the unwritten."""
        self._free_slot(active)
        if active.unwritten:
            active.unwritten = False
            self._unwritten -= 1
            while self._parked and self._unwritten < self.concurrency:
                parked = self._parked.popleft()
                if parked.slot_held:
                    self._await_write(parked)

    def _free_slot(self, active: ActiveRun) -> None:
        if active.slot_held:
            active.slot_held = False
            self._running -= 1
            self._announce_free_slot()
            if self._running == 0:
                self._idle.set()

    def _announce_free_slot(self) -> None:
        # Wakes every task waiting for a slot (the claimer, resuming handlers); each re-checks.
        # Nobody waiting: nothing to wake, and the event stays for the next one to wait.
        freed = self._slot_free
        if freed.statistics().tasks_waiting:
            self._slot_free = self._primitives.new_event()
            freed.set()

    # -- waiting handlers hold no local slot ---------------------------------------------

    def _log_start(self) -> None:
        server = conninfo_to_dict(self.dsn)
        fields = {
            "worker_id": self.worker_id,
            "tasks": [name for name in self.registry.names() if not name.startswith("fairlane.")],
            "environments": list(self.environments or []) or "all",
            "queues": list(self.queues or []) or "all",
            "concurrency": self.concurrency, "lease_seconds": self.store.lease_seconds,
            # Never the password: host, port and database only.
            "server": f"{server.get('host', 'local')}:{server.get('port', 5432)}"
                      f"/{server.get('dbname', '')}",
            "schema": self.schema, "schema_revision": SCHEMA_REVISION,
        }  # fmt: skip
        log.info(
            "worker %s started: tasks %s, environments %s, queues %s, concurrency %s, "
            "lease %ss, server %s, schema %s at %s",
            *fields.values(), extra=fields,
        )  # fmt: skip

    def _release_local_slot(self) -> None:
        # The waiting handler keeps its runner, so another runner takes its place meanwhile.
        self._running -= 1
        if self._runners is not None:
            self._runners.start_soon(self._runner)
        self._announce_free_slot()
        if self._running == 0:
            self._idle.set()

    async def _reacquire_local_slot(self) -> None:
        while self._running >= self.concurrency:
            await self._slot_free.wait()
        self._running += 1
        self._surplus_runners += 1

    # -- callbacks ----------------------------------------------------------------------

    def _notified(self, environment: str) -> None:
        if (
            environment == notifier.ANY_ENVIRONMENT
            or self.environments is None
            or environment in self.environments
        ):
            self.stats.wakeups += 1
            self._work_announced = True
            self._wake.set()

    def _lease_lost(self, active: ActiveRun) -> None:
        if active.handler_done:
            # Its outcome is queued or in flight, and may well have just ended the lease. If
            # the lease was really lost, the fence refuses the write and the writer counts it.
            return
        if active.ctx.stop_reason is None:
            self.stats.lost_leases += 1
            log.warning("run %s: lease lost; stopping its handler", active.run.id)
        active.stop(STOP_LEASE_LOST)

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

    def _cancel_requested(self, run_id: int) -> None:
        """The run was cancelled while executing (the cancel channel): stop its handler."""
        active = self.held.get(run_id)
        if active is None or active.handler_done or active.ctx.stop_reason is not None:
            # Not ours, or finishing already: the fence refuses whatever outcome it writes.
            return
        self.stats.canceled += 1
        log.info("run %s: canceled; stopping its handler", run_id)
        active.stop(STOP_CANCELED)

    def _outcome_abandoned(self, active: ActiveRun) -> None:
        """The run's outcome was not written before its lease lapsed (the writer cannot reach
        the database): this worker no longer vouches for it. The run will be reclaimed and run
        again; the writer still tries, and the fence refuses it if someone else has the run."""
        log.warning(
            "run %s: outcome not written before the lease lapsed; the run will be run again",
            active.run.id,
        )
        self.stats.lost_leases += 1
        self._let_go(active)
        self._forget(active)

    def _outcomes_written(self, leases: Sequence[Lease]) -> None:
        held = self.held
        for lease in leases:
            active = held.get(lease.run_id)
            if active is not None and active.lease == lease:
                self._let_go(active)
                self._forget(active)
        # Written outcomes free database slots: a claim that came back short because of a cap
        # tries again now instead of sleeping out its poll interval.
        self._wake.set()

    def _forget(self, active: ActiveRun) -> None:
        """Stop tracking ``active``; a later attempt of the same run held here stays."""
        if self.held.get(active.run.id) is active:
            del self.held[active.run.id]
        # The run and its context point at each other: without this the pair and all it
        # holds wait for a full collection, whose cost grows with every run since the last.
        active.ctx._active = None


class _ReadyQueue:
    """Claimed runs waiting for a runner.

    Unbounded: the claimer never asks for more runs than there are idle runners, so whatever
    is here is picked up within a few loop turns. Idle runners are woken ``_WAKE_AHEAD`` at a
    time, and every runner that takes a run tops the wake-ups up while runs remain. Handlers
    that return without suspending are then run back to back by the runners already awake,
    rather than every idle runner being woken once per run; handlers that do suspend still
    get a runner each, ``_WAKE_AHEAD`` more per loop turn.
    """

    def __init__(self) -> None:
        self._items: deque[ActiveRun] = deque()
        self._waiters: deque[anyio.Event] = deque()
        self._waking = 0  # runners woken that have not resumed yet
        self.primitives = GENERIC

    def put(self, item: ActiveRun) -> None:
        self._items.append(item)
        self._wake_more()

    def _wake_more(self) -> None:
        wanted = min(len(self._items), _WAKE_AHEAD)
        while self._waking < wanted and self._waiters:
            self._waking += 1
            self._waiters.popleft().set()

    async def get(self) -> ActiveRun:
        while not self._items:
            waiter = self.primitives.new_event()
            self._waiters.append(waiter)
            try:
                await waiter.wait()
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                else:
                    # Woken, then cancelled: let another runner have the wake-up.
                    self._waking -= 1
                    self._wake_more()
                raise
            self._waking -= 1
        item = self._items.popleft()
        self._wake_more()
        return item


_WAKE_AHEAD = 16


def run_forever(worker: Worker, **kwargs: Any) -> None:
    """Run ``worker`` on a fresh asyncio loop until it stops (sync entry point)."""
    anyio.run(worker.run, **kwargs)


__all__ = ["Worker", "run_forever"]
