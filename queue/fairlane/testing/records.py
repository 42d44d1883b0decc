"""The runs of an eager block, kept in memory: each as a record its execution updates, read
as the ``Run`` a client's ``get_run`` returns."""

from __future__ import annotations

import asyncio
import contextvars
import json
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio

from fairlane.durations import seconds
from fairlane.models import KEPT_ATTEMPT_ERRORS, AttemptError, ClaimedRun, Run, RunStatus
from fairlane.payload import encode_json
from fairlane.triggering.idempotency import stored_key
from fairlane.triggering.request import TriggerRequest, environment_of
from fairlane.waitpoints import WaitResult

T = TypeVar("T")

# A run triggered without max_attempts gets as many as the trigger statement gives it.
DEFAULT_MAX_ATTEMPTS = 3
WORKER_ID = "eager"
# Statuses that free a run's idempotency key (fairlane.triggering.idempotency).
KEY_FREEING = frozenset(
    {
        RunStatus.FAILED,
        RunStatus.CRASHED,
        RunStatus.TIMED_OUT,
        RunStatus.EXPIRED,
        RunStatus.SYSTEM_FAILURE,
    }
)


def _now() -> datetime:
    return datetime.now(UTC)


def _as_stored(value: Any, what: str) -> Any:
    """``value`` as the database would hand it back: checked and round-tripped through JSON."""
    return json.loads(encode_json(value, what=what))


@dataclass(slots=True)
class EagerRecord:
    id: int
    task: str
    payload: Any
    environment: str
    queue: str
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    machine: str | None
    max_duration_s: float | None
    parent_run_id: int | None
    idempotency_key: str | None
    created_at: datetime = field(default_factory=_now)
    status: RunStatus = RunStatus.QUEUED
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    attempt_errors: list[AttemptError] = field(default_factory=list)
    earlier_attempt_errors: int = 0

    @classmethod
    def of(cls, run_id: int, request: TriggerRequest, key: str | None) -> EagerRecord:
        return cls(
            id=run_id,
            task=request.task,
            payload=_as_stored(request.payload, "payload"),
            environment=environment_of(request),
            queue=request.queue,
            priority=request.priority,
            max_attempts=request.max_attempts or DEFAULT_MAX_ATTEMPTS,
            tags=list(request.tags or ()),
            metadata=_as_stored(dict(request.metadata or {}), "metadata"),
            machine=request.machine,
            max_duration_s=seconds("max_duration", request.max_duration),
            parent_run_id=request.parent_run_id,
            idempotency_key=key,
        )

    @classmethod
    def pre_failed(
        cls, run_id: int, request: TriggerRequest, parent_run_id: int, code: str, message: str
    ) -> EagerRecord:
        """A run that ended SYSTEM_FAILURE before it ran (a batch item that could not trigger)."""
        record = cls(
            id=run_id,
            task=request.task,
            payload=None,
            environment=environment_of(request),
            queue=request.queue,
            priority=0,
            max_attempts=1,
            tags=[],
            metadata={},
            machine=None,
            max_duration_s=None,
            parent_run_id=parent_run_id,
            idempotency_key=None,
        )
        record.status, record.finished_at = RunStatus.SYSTEM_FAILURE, record.created_at
        record.error = {"type": "SystemFailure", "code": code, "message": message, "attempt": 0}
        return record

    def claimed(self) -> ClaimedRun:
        """The attempt as a worker would hold it. Its metadata is the record's own dict, so the
        handler's ``set_metadata`` lands in the record. An eager attempt follows a failure (no
        worker dies here), so it is its own wait attempt: its waits start afresh."""
        return ClaimedRun(
            id=self.id,
            lease_token=uuid.uuid4(),
            task=self.task,
            payload=self.payload,
            attempt=self.attempts,
            max_attempts=self.max_attempts,
            environment=self.environment,
            queue=self.queue,
            metadata=self.metadata,
            machine=self.machine,
            max_duration_s=self.max_duration_s,
            wait_attempt=self.attempts,
        )

    def finish(
        self, status: RunStatus, *, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        self.status, self.result, self.finished_at = status, result, _now()
        if error is not None:
            self.attempt_failed(error)
        else:
            self.error = None

    def attempt_failed(self, error: dict[str, Any]) -> None:
        """The attempt ended with ``error``: the last error, and one more in the history (the
        database keeps the last ten)."""
        self.error = error
        self.attempt_errors.append(AttemptError(self.attempts, _now(), error))
        if len(self.attempt_errors) > KEPT_ATTEMPT_ERRORS:
            del self.attempt_errors[0]
            self.earlier_attempt_errors += 1

    def run(self) -> Run:
        started = self.started_at is not None
        return Run(
            id=self.id,
            environment=self.environment,
            queue=self.queue,
            task=self.task,
            payload=self.payload,
            status=self.status,
            priority=self.priority,
            attempts=self.attempts,
            max_attempts=self.max_attempts,
            available_at=self.created_at,
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            lease_token=None,
            lease_until=None,
            worker_id=WORKER_ID if started else None,
            result=self.result,
            error=self.error,
            tags=list(self.tags),
            metadata=dict(self.metadata),
            machine=self.machine,
            max_duration_s=self.max_duration_s,
            parent_run_id=self.parent_run_id,
            idempotency_key=self.idempotency_key,
            attempt_errors=tuple(self.attempt_errors),
            earlier_attempt_errors=self.earlier_attempt_errors,
        )

    def wait_result(self) -> WaitResult:
        """What a waiting parent gets, as from the run's waitpoint."""
        if self.status is RunStatus.COMPLETED:
            return WaitResult(ok=True, output=self.result, run_id=self.id)
        error = {"status": self.status.value, "error": self.error}
        return WaitResult(ok=False, error=error, run_id=self.id)


def idempotency_key(request: TriggerRequest, parent: ClaimedRun | None) -> str | None:
    """The key as stored, scoped to the parent run (an eager parent's id) when there is one."""
    if request.idempotency_key is None:
        return None
    parent_id = request.parent_run_id or (parent.id if parent is not None else None)
    parent_attempt = request.parent_attempt or (parent.wait_attempt if parent is not None else None)
    return stored_key(
        request.idempotency_key,
        request.idempotency_scope,
        parent_run_id=parent_id,
        parent_attempt=parent_attempt,
    )


def run_blocking(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` to its end from sync code: on an event loop of its own in this thread, or,
    when this thread's loop is busy calling us (a sync trigger from async code), in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(work)
    context = contextvars.copy_context()

    def in_thread() -> T:
        return context.run(_run_on_a_new_loop, work)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairlane-eager") as pool:
        return pool.submit(in_thread).result()


def _run_on_a_new_loop(work: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run`` in a context copied from a running loop's task: sniffio's note that the
    copied context runs asyncio (set when sniffio is installed) is cleared first, or anyio
    refuses to start a loop in a thread that has none."""
    try:
        import sniffio
    except ImportError:  # pragma: no cover - anyio does not require it
        return anyio.run(work)
    sniffio.current_async_library_cvar.set(None)
    return anyio.run(work)
