"""The public value types: what the clients, the worker and the CLI return (runs, claimed
runs, what a cancel or bulk action did, what a run waits on, scheduling settings, periodic
jobs and settings, batches and their items, tokens, keys, schedules). Engine statements read
their rows into these where the row is the public value."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from fairlane.frozen import fast_init


class RunStatus(enum.StrEnum):
    DELAYED = "DELAYED"
    QUEUED = "QUEUED"
    EXECUTING = "EXECUTING"
    WAITING = "WAITING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CRASHED = "CRASHED"
    TIMED_OUT = "TIMED_OUT"
    EXPIRED = "EXPIRED"
    CANCELED = "CANCELED"
    SYSTEM_FAILURE = "SYSTEM_FAILURE"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CRASHED,
        RunStatus.TIMED_OUT,
        RunStatus.EXPIRED,
        RunStatus.CANCELED,
        RunStatus.SYSTEM_FAILURE,
    }
)


# How many failed attempts' errors a run keeps in full (sql/runs/attempts.sql keeps the same).
KEPT_ATTEMPT_ERRORS = 10


@dataclass(frozen=True, slots=True)
class AttemptError:
    """The error one failed attempt of a run ended with (``Run.attempt_errors``)."""

    attempt: int
    failed_at: datetime
    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Run:
    """A run as stored: what ``Client.get_run`` and the CLI return."""

    id: int
    environment: str
    queue: str
    task: str
    payload: Any
    status: RunStatus
    priority: int
    attempts: int
    max_attempts: int
    available_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_token: UUID | None
    lease_until: datetime | None
    worker_id: str | None
    result: Any
    error: dict[str, Any] | None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    machine: str | None = None
    max_duration_s: float | None = None
    parent_run_id: int | None = None
    # The stored (hashed) idempotency key while it is active, and when it expires.
    idempotency_key: str | None = None
    idempotency_key_expires_at: datetime | None = None
    # When it last entered its queue, and the order claims take it in: queued_at minus its
    # priority in seconds (README, Scheduling).
    queued_at: datetime | None = None
    queue_order: datetime | None = None
    # The errors of its most recent failed attempts (at most KEPT_ATTEMPT_ERRORS), oldest
    # first, and how many earlier failed attempts are counted but no longer kept. ``error`` is
    # the last one's.
    attempt_errors: tuple[AttemptError, ...] = ()
    earlier_attempt_errors: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run a worker holds under a lease. A claim builds thousands a second: its ``__init__``
    sets the slots directly (``fairlane.frozen`` says why)."""

    id: int
    lease_token: UUID
    task: str
    payload: Any
    attempt: int
    max_attempts: int
    environment: str
    queue: str
    metadata: dict[str, Any]
    machine: str | None
    max_duration_s: float | None
    # Its place in its queue's claim order (queued_at minus priority seconds).
    queue_order: datetime | None = None
    # The attempt whose waits this execution keeps (``RunContext.wait_attempt``); None: the
    # attempt itself.
    wait_attempt: int | None = None
    # Whether the run has recorded steps or waits (run_steps) that its handler replays.
    replay: bool = False


@dataclass(frozen=True, slots=True)
class EnvironmentSettings:
    name: str
    concurrency_limit: int | None
    burst_factor: Decimal
    paused: bool
    # Most runs that may wait to start (QUEUED or DELAYED) across its queues; None: unlimited.
    size_limit: int | None = None

    @property
    def cap(self) -> int | None:
        """floor(limit x burst): how many runs of the environment may execute at once."""
        if self.concurrency_limit is None:
            return None
        return int(self.concurrency_limit * self.burst_factor)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    environment: str
    name: str
    concurrency_limit: int | None
    paused: bool
    # Most runs that may wait to start (QUEUED or DELAYED) in it; None: unlimited.
    size_limit: int | None = None
    # Its cap across its concurrency keys (concurrency_limit bounds each key); None: unlimited.
    total_limit: int | None = None
    # Runs started per rate_period_s seconds, per concurrency key (keyless runs share one);
    # at most rate_burst at once (None: rate_limit). None: no rate.
    rate_limit: int | None = None
    rate_period_s: float | None = None
    rate_burst: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    quantum: int
    max_deficit: int
    global_concurrency_limit: int | None
    rate_limit_per_s: float | None
    rate_burst: float | None


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    name: str
    function: str
    interval_s: float
    enabled: bool
    next_due_at: datetime
    last_started_at: datetime | None
    last_finished_at: datetime | None
    last_result: dict[str, Any] | None
    last_error: str | None
    run_count: int


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    value: Any
    description: str


@dataclass(frozen=True, slots=True)
class BatchRuns:
    """How the runs a batch's items made are doing (``Batch.runs``): ``failed`` counts every
    unsuccessful end but a cancel (FAILED, CRASHED, TIMED_OUT, EXPIRED, SYSTEM_FAILURE),
    ``running`` the EXECUTING and WAITING ones, ``queued`` the QUEUED and DELAYED ones;
    ``not_yet_runs`` the items of the batch that have no run yet."""

    succeeded: int = 0
    failed: int = 0
    canceled: int = 0
    running: int = 0
    queued: int = 0
    not_yet_runs: int = 0

    @property
    def ended(self) -> bool:
        return self.running == 0 and self.queued == 0 and self.not_yet_runs == 0


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch. ``status``, ``succeeded`` and ``failed`` are about its items: whether each
    became a run (``succeeded``) or could not (``failed``), and ``status`` COMPLETED once every
    item did one or the other. How those runs ended is ``runs`` (``BatchRuns``), and
    ``outcome`` sums it up."""

    id: int
    environment: str
    run_count: int
    status: str
    sealed: bool
    succeeded: int
    failed: int
    parent_run_id: int | None
    waitpoint_id: int | None
    idempotency_key: str | None
    created_at: datetime
    sealed_at: datetime | None
    completed_at: datetime | None
    error: dict[str, Any] | None
    received: int
    runs: BatchRuns = BatchRuns()

    @property
    def done(self) -> bool:
        return self.status in ("COMPLETED", "PARTIAL_FAILED", "ABORTED")

    @property
    def outcome(self) -> str:
        """RUNNING while an item has no run yet or a run has not ended; then SUCCEEDED when
        every run completed, else FAILED (a run failed or was canceled, an item could not
        become a run, or the batch was aborted)."""
        if self.status == "ABORTED":
            return "FAILED"
        if not self.runs.ended:
            return "RUNNING"
        if self.runs.succeeded == self.run_count:
            return "SUCCEEDED"
        return "FAILED"


def batch_runs(run_count: int, outcomes: dict[str, int] | None) -> BatchRuns:
    """``BatchRuns`` from the counts ``batch_run_outcomes`` (sql/batches/read.sql) returns."""
    counted = outcomes or {}
    return BatchRuns(
        succeeded=counted.get("succeeded", 0),
        failed=counted.get("failed", 0),
        canceled=counted.get("canceled", 0),
        running=counted.get("running", 0),
        queued=counted.get("queued", 0),
        not_yet_runs=max(run_count - counted.get("runs", 0), 0),
    )


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Where a batch stands after an ingest call: ``accepted`` new items in this call
    (``oversized`` of them pre-failed), ``received`` items in the batch overall."""

    batch_id: int
    accepted: int
    received: int
    run_count: int
    sealed: bool
    status: str
    oversized: int = 0
    lines: int = 0


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key of the HTTP API as stored (never the key itself: only its hash is kept).

    ``kind`` is ``environment`` (confined to ``environment``) or ``admin`` (every
    environment, and the dashboard; ``environment`` is None)."""

    id: int
    kind: str
    environment: str | None
    name: str | None
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"


@dataclass(frozen=True, slots=True)
class Token:
    """A token (a MANUAL waitpoint) as the HTTP API reads it; ``environment`` is the one
    that made it through the API (None: made by the library)."""

    id: int
    environment: str | None
    status: str
    is_error: bool
    output: Any
    created_at: datetime
    completed_at: datetime | None
    timeout_at: datetime | None
    # The key as stored (scoped); None without one.
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron schedule (fairlane.schedules): every tick of ``cron`` in ``timezone`` triggers a
    run of ``task`` in ``environment`` with ``payload`` and the trigger ``options``."""

    id: int
    environment: str
    key: str
    task: str
    cron: str
    timezone: str
    payload: Any
    options: dict[str, Any]
    declared: bool
    paused: bool
    next_fire_at: datetime
    last_tick: datetime | None
    last_run_id: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What ``Client.cancel`` did.

    ``canceled`` is False when the run had already ended: then ``status`` is the final status
    it keeps. ``descendants_canceled`` counts runs below it (by ``parent_run_id``) that were
    still going and are CANCELED now.
    """

    run_id: int
    canceled: bool
    status: RunStatus
    previous_status: RunStatus
    descendants_canceled: int = 0

    @property
    def already_final(self) -> bool:
        return not self.canceled


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk retry or cancel did: runs that matched, runs it changed, and for the others
    why not: their status, or QUEUE_FULL for a retry a size limit refused."""

    matched: int
    changed: int
    unchanged: dict[str, int]


@dataclass(frozen=True, slots=True)
class WaitsOn:
    """One waitpoint a run waits on (``Client.waits_on``, ``runs show``)."""

    position: int
    item: int
    waitpoint_id: int
    kind: str
    status: str
    run_id: int | None
    complete_after: datetime | None
    timeout_at: datetime | None
    batch_id: int | None


@dataclass(frozen=True, slots=True)
class RunStep:
    """One recorded call of a run's handler (``Client.steps``, ``runs show``, the run page): a
    step (``ctx.step``) with its result or error, or a wait; ``attempt`` is the wait attempt
    that recorded it. A wait is COMPLETED when its last waitpoint completed (``finished_at``),
    and its ``result`` is the outputs of its waitpoints, by item."""

    position: int
    kind: str  # STEP or WAIT
    name: str
    attempt: int
    status: str  # WAITING, COMPLETED or FAILED
    result: Any
    error: Any
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class ItemRow:
    """A batch item and how it stands: its run once triggered, its error if it failed."""

    index: int
    state: str
    run_id: int | None
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A registered worker (the workers registry): what it serves, where it runs, and when
    its heartbeat last reached the database. ``environments`` and ``queues`` None: all.
    ``live`` is False once it was not seen within its bound (its lease): gone or hung, its row
    stays until the ``prune_dead_workers`` job deletes it."""

    id: str
    host: str
    pid: int
    version: str
    tasks: list[str]
    environments: list[str] | None
    queues: list[str] | None
    concurrency: int
    stopping: bool
    started_at: datetime
    last_seen_at: datetime
    live: bool


@dataclass(frozen=True, slots=True)
class UnservedTask:
    """A task with QUEUED runs in ``environment`` that no live worker serves: none has its
    handler and serves those runs' environment and queue. ``runs`` and ``oldest_queued_at``
    count the heads of its ``queues`` (sql/worker/registry.sql, ``unserved_tasks``)."""

    environment: str
    task: str
    queues: list[str]
    runs: int
    oldest_queued_at: datetime
