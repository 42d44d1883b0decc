"""Reading runs and acting on them from outside a worker: get, list, cancel, reschedule, retry,
create pre-failed.

Each is an operation over the engine's statements (sql/runs/), which decide on the locked row:
this module checks the arguments, and turns the rows into typed results and errors. ``Client``
and ``AsyncClient`` drive the same operations (fairlane.engine.statement.drive).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from fairlane.durations import Duration, seconds
from fairlane.engine import Engine
from fairlane.engine.runs import BulkRow, CancelRow, FailedRun, RescheduleRow, RetryRow, RunQuery
from fairlane.engine.statement import Operation, Statement
from fairlane.errors import (
    QueueSizeLimitExceeded,
    RunFilterError,
    RunNotDelayedError,
    RunNotFoundError,
    RunNotRetryableError,
    TriggerOptionError,
)

# BulkResult and CancelResult were defined here: this path keeps working.
from fairlane.models import BulkResult as BulkResult
from fairlane.models import CancelResult as CancelResult
from fairlane.models import Run, RunStatus, RunStep, WaitsOn
from fairlane.payload import encode_json
from fairlane.triggering.boundary import check_names
from fairlane.triggering.idempotency import IdempotencyScope, stored_key

# Error codes of pre-failed runs (the seeds' codes; any non-empty code is accepted).
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
BATCH_ITEM_COULD_NOT_TRIGGER = "BATCH_ITEM_COULD_NOT_TRIGGER"


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
    return (yield engine.runs.list(filters.query()))


def waits_on(engine: Engine, run_id: int) -> Operation[list[WaitsOn]]:
    """What a run waits on: every waitpoint at every call position, pending or completed."""
    return (yield engine.waits.waits_on(run_id))


def steps(engine: Engine, run_id: int) -> Operation[list[RunStep]]:
    """A run's recorded steps and waits, by call position (docs/durable-execution.md)."""
    return (yield engine.journal.run_steps(run_id))


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
        statement = engine.runs.reschedule(run_id, start_at=delay, delay_s=None)
    else:
        statement = engine.runs.reschedule(run_id, start_at=None, delay_s=seconds("delay", delay))
    found = yield statement
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
                row.environment or "",
                row.queue or "",
                row.size_limit,
                scope=row.scope or "queue",
                size=row.size or 0,
                index=0,
            )
        raise RunNotRetryableError(run_id, row.previous_status)
    return (yield from get_run(engine, run_id))


# Runs a bulk action takes per statement (and so per transaction).
BULK_PAGE = 1000


def _pages(engine: Engine, filters: RunFilter) -> Generator[Statement[Any], list[Any], list[int]]:
    """The next page of matching ids below ``filters.before_id``."""
    return (yield engine.runs.matching_ids(replace(filters.query(), limit=BULK_PAGE)))


def count_matching(engine: Engine, filters: RunFilter) -> Operation[int]:
    """How many runs a bulk action would take (a dry run): one statement."""
    found = yield engine.runs.count_matching(filters.query())
    return int(found[0])


def _bulk(
    engine: Engine, filters: RunFilter, act: Callable[[list[int]], Statement[BulkRow]]
) -> Operation[BulkResult]:
    matched = changed = 0
    unchanged: Counter[str] = Counter()
    before = filters.before_id
    while ids := (yield from _pages(engine, replace(filters, before_id=before))):
        rows: list[BulkRow] = yield act(ids)
        matched += len(ids)
        for row in rows:
            if row.done:
                changed += 1
            else:
                unchanged["QUEUE_FULL" if row.size_limit is not None else row.previous_status] += 1
        before = ids[-1]
    return BulkResult(matched, changed, dict(unchanged))


def retry_many(engine: Engine, filters: RunFilter) -> Operation[BulkResult]:
    """Retry every matching run that can be, ``BULK_PAGE`` per statement, newest first."""
    return (yield from _bulk(engine, filters, engine.runs.retry_many))


def cancel_many(engine: Engine, filters: RunFilter) -> Operation[BulkResult]:
    """Cancel every matching run still going (with its descendants), newest first."""
    return (yield from _bulk(engine, filters, engine.runs.cancel_many))


def create_failed_run(engine: Engine, run: FailedRun) -> Operation[int]:
    """``run``: from ``failed_run_params``."""
    found = yield engine.runs.insert_failed(run)
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
    # Batch carrier runs (fairlane's own, in the reserved __batches__ queue) are hidden unless
    # asked for.
    include_carriers: bool = False
    # Only runs created within this long (bulk actions; ``list_runs`` ignores it).
    since: Duration | None = None
    # Only the runs this batch's items made.
    batch_id: int | None = None
    # Only the runs triggered with this idempotency key (active or freed): as the caller gave
    # it to a trigger without a parent run (a key's stored form is a hash of the key and its
    # scope, fairlane.triggering.idempotency), or as stored (the hash itself).
    idempotency_key: str | None = None

    @property
    def is_empty(self) -> bool:
        """No filter at all: a bulk action would take every run."""
        return not (
            self.environment
            or self.queue
            or self.task
            or self.status
            or self.tags
            or self.before_id
            or self.since is not None
            or self.batch_id is not None
            or self.idempotency_key is not None
        )

    def query(self) -> RunQuery:
        statuses: list[str] | None = None
        if self.status is not None:
            wanted = [self.status] if isinstance(self.status, str) else list(self.status)
            known = {status.value for status in RunStatus}
            unknown = [status for status in wanted if str(status).upper() not in known]
            if unknown:
                raise RunFilterError("status", unknown[0], f"not one of {sorted(known)}")
            statuses = [str(status).upper() for status in wanted]
        if isinstance(self.tags, str):
            raise RunFilterError("tags", self.tags, "must be a sequence of strings")
        return RunQuery(
            environment=self.environment,
            queue=self.queue,
            task=self.task,
            statuses=statuses,
            tags=list(self.tags) or None,
            before_id=self.before_id,
            include_carriers=self.include_carriers,
            limit=self.limit,
            since_s=seconds("since", self.since) if self.since is not None else None,
            batch_id=self.batch_id,
            idempotency_keys=_stored_keys(self.idempotency_key),
        )


def _stored_keys(key: str | None) -> list[str] | None:
    """The forms a key given to a filter may be stored in: hashed as a trigger without a
    parent run stores it (every scope is global there), or the stored hash itself."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or "\x00" in key:
        raise RunFilterError("idempotency_key", key, "must be a non-empty string without NUL")
    return [stored_key(key, IdempotencyScope.GLOBAL), key]


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
) -> FailedRun:
    """The run ``insert_failed_run`` records, checked like a trigger before anything is sent."""
    for option, value in (
        ("task", task),
        ("code", code),
        ("environment", environment),
        ("queue", queue),
    ):
        if not value or not isinstance(value, str) or "\x00" in value:
            raise TriggerOptionError(option, value, "must be a non-empty string without NUL")
    check_names(task, queue)
    if isinstance(tags, str):
        raise TriggerOptionError("tags", tags, "must be a sequence of strings")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise TriggerOptionError("max_attempts", max_attempts, "must be a positive integer")
    # Encoding refuses NUL characters and lone surrogates, which text columns cannot hold.
    encode_json([message, list(tags), machine], what="message, tags or machine")
    return FailedRun(
        environment=environment,
        queue=queue,
        task=task,
        payload=encode_json(payload),
        max_attempts=max_attempts,
        tags=list(tags),
        metadata=encode_json(dict(metadata or {}), what="metadata"),
        machine=machine,
        parent_run_id=parent_run_id,
        code=code,
        message=message,
    )
