"""Reading runs and acting on them from outside a worker: get, list, cancel, reschedule, retry,
create pre-failed.

Each is an operation over the engine's statements (sql/runs/), which decide on the locked row:
this module checks the arguments, and turns the rows into typed results and errors. ``Client``
and ``AsyncClient`` drive the same operations (fairlane.engine.statement.drive).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairlane.durations import Duration, seconds
from fairlane.engine import Engine
from fairlane.engine.runs import CancelRow, RescheduleRow, RetryRow
from fairlane.engine.statement import Operation
from fairlane.errors import (
    QueueSizeLimitExceeded,
    RunNotDelayedError,
    RunNotFoundError,
    RunNotRetryableError,
    TriggerOptionError,
)
from fairlane.models import Run, RunStatus
from fairlane.payload import encode_json

# Error codes of pre-failed runs (the seeds' codes; any non-empty code is accepted).
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
BATCH_ITEM_COULD_NOT_TRIGGER = "BATCH_ITEM_COULD_NOT_TRIGGER"


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


def get_run(engine: Engine, run_id: int) -> Operation[Run]:
    found = yield engine.runs.get(run_id)
    if not found:
        raise RunNotFoundError(run_id)
    return found[0]  # type: ignore[no-any-return]


def watch_run(engine: Engine, run_id: int) -> Operation[Run]:
    """The run, after making sure its end will be announced on the finished channel (its
    waitpoint exists: the run is marked ``has_waiters``). Run in one transaction: the run's
    row lock orders it with the statement that finishes the run, which then either finished
    first (the run read here is final) or sees the mark and announces it."""
    yield engine.waits.lock_awaited_runs([run_id])
    yield engine.waits.ensure_run_waitpoints([run_id])
    return (yield from get_run(engine, run_id))


def list_runs(engine: Engine, filters: RunFilter) -> Operation[list[Run]]:
    return (yield engine.runs.list(filters.params()))


def count_by_status(engine: Engine) -> Operation[dict[str, int]]:
    return dict((yield engine.runs.count_by_status()))


def cancel(engine: Engine, run_id: int) -> Operation[CancelResult]:
    found = yield engine.runs.cancel(run_id)
    if not found:
        raise RunNotFoundError(run_id)
    row: CancelRow = found[0]
    previous = RunStatus(row.previous_status)
    status = RunStatus.CANCELED if row.canceled else previous
    return CancelResult(run_id, row.canceled, status, previous, row.descendants)


def reschedule(engine: Engine, run_id: int, delay: Duration | datetime) -> Operation[Run]:
    """``delay`` from now (the database's clock), or an aware datetime to start at."""
    if isinstance(delay, datetime):
        if delay.tzinfo is None or delay.utcoffset() is None:
            raise TriggerOptionError("delay", delay, "a datetime must carry its time zone")
        params = {"id": run_id, "start_at": delay, "delay_s": None}
    else:
        params = {"id": run_id, "start_at": None, "delay_s": seconds("delay", delay)}
    found = yield engine.runs.reschedule(params)
    if not found:
        raise RunNotFoundError(run_id)
    row: RescheduleRow = found[0]
    if not row.rescheduled:
        raise RunNotDelayedError(run_id, row.status)
    return (yield from get_run(engine, run_id))


def retry(engine: Engine, run_id: int) -> Operation[Run]:
    found = yield engine.runs.retry(run_id)
    if not found:
        raise RunNotFoundError(run_id)
    row: RetryRow = found[0]
    if not row.retried:
        if row.size_limit is not None:
            raise QueueSizeLimitExceeded(
                row.environment or "", row.queue or "", row.size_limit, scope=row.scope or "queue",
                size=row.size or 0, index=0,
            )  # fmt: skip
        raise RunNotRetryableError(run_id, row.previous_status)
    return (yield from get_run(engine, run_id))


def create_failed_run(engine: Engine, params: dict[str, Any]) -> Operation[int]:
    """``params``: from ``failed_run_params``."""
    found = yield engine.runs.insert_failed(params)
    return int(found[0])


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs ``Client.list_runs`` returns, newest first. Every filter is optional.

    ``status`` is one status or several; ``tags`` keeps runs that carry all of them.
    ``before_id`` pages: pass the smallest id of the previous page.
    """

    environment: str | None = None
    queue: str | None = None
    task: str | None = None
    status: str | Sequence[str] | None = None
    tags: Sequence[str] = ()
    limit: int = 100
    before_id: int | None = None

    def params(self) -> dict[str, Any]:
        statuses: list[str] | None = None
        if isinstance(self.status, str):
            statuses = [RunStatus(self.status).value]
        elif self.status is not None:
            statuses = [RunStatus(status).value for status in self.status]
        if isinstance(self.tags, str):
            raise TriggerOptionError("tags", self.tags, "must be a sequence of strings")
        return {
            "environment": self.environment, "queue": self.queue, "task": self.task,
            "statuses": statuses, "tags": list(self.tags) or None, "limit": self.limit,
            "before_id": self.before_id,
        }  # fmt: skip


def failed_run_params(
    task: str,
    payload: Any,
    *,
    code: str,
    message: str,
    environment: str = "default",
    queue: str = "default",
    parent_run_id: int | None = None,
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    machine: str | None = None,
    max_attempts: int = 1,
) -> dict[str, Any]:
    """Parameters of ``insert_failed_run``, checked like a trigger's before anything is sent."""
    for option, value in (("task", task), ("code", code), ("environment", environment),
                          ("queue", queue)):  # fmt: skip
        if not value or not isinstance(value, str) or "\x00" in value:
            raise TriggerOptionError(option, value, "must be a non-empty string without NUL")
    if isinstance(tags, str):
        raise TriggerOptionError("tags", tags, "must be a sequence of strings")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise TriggerOptionError("max_attempts", max_attempts, "must be a positive integer")
    # Encoding refuses NUL characters and lone surrogates, which text columns cannot hold.
    encode_json([message, list(tags), machine], what="message, tags or machine")
    return {
        "task": task, "payload": encode_json(payload), "code": code, "message": message,
        "environment": environment, "queue": queue, "parent_run_id": parent_run_id,
        "tags": list(tags), "metadata": encode_json(dict(metadata or {}), what="metadata"),
        "machine": machine, "max_attempts": max_attempts,
    }  # fmt: skip
