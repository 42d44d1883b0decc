"""Runs read and acted on from outside a worker (sql/runs/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairlane.engine.rows import run_from_row
from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, scalar
from fairlane.models import Run


@dataclass(frozen=True, slots=True)
class CancelRow:
    previous_status: str
    canceled: bool
    descendants: int


@dataclass(frozen=True, slots=True)
class RescheduleRow:
    status: str
    rescheduled: bool


@dataclass(frozen=True, slots=True)
class RetryRow:
    previous_status: str
    retried: bool
    # The size limit that refused the retry, if one did.
    environment: str | None
    queue: str | None
    size_limit: int | None
    scope: str | None
    size: int | None


@dataclass(frozen=True, slots=True)
class BulkRow:
    """One run of a bulk retry or cancel: whether it changed (``done``), and else why not (its
    status, or the size limit of a full queue)."""

    id: int
    previous_status: str
    done: bool
    size_limit: int | None = None


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Which runs a listing or a bulk action takes (``RunFilter.query()``), newest first.
    ``since_s``: created within that many seconds (bulk actions; a listing leaves it None)."""

    environment: str | None
    queue: str | None
    task: str | None
    statuses: list[str] | None
    tags: list[str] | None
    before_id: int | None
    include_carriers: bool
    limit: int
    since_s: float | None
    batch_id: int | None = None
    # The stored forms of an idempotency key (RunFilter.query()); None: any.
    idempotency_keys: list[str] | None = None


@dataclass(frozen=True, slots=True)
class FailedRun:
    """A run recorded as failed without running (``insert_failed_run``): payload and
    metadata as JSON text."""

    environment: str
    queue: str
    task: str
    payload: str
    max_attempts: int
    tags: list[str]
    metadata: str
    machine: str | None
    parent_run_id: int | None
    code: str
    message: str


class Runs(Section):
    def get(self, run_id: int) -> Statement[Run]:
        return self._statement("get_run", {"id": run_id}, run_from_row)

    def list(self, query: RunQuery) -> Statement[Run]:
        return self._statement("list_runs", _filter(query, paged=True), run_from_row)

    def count_by_status(self) -> Statement[tuple[str, int]]:
        return self._statement(
            "count_runs_by_status", None, lambda row: (str(row["status"]), int(row["runs"]))
        )

    def cancel(self, run_id: int) -> Statement[CancelRow]:
        return self._statement("cancel_run", {"id": run_id}, lambda row: CancelRow(**row))

    def reschedule(
        self, run_id: int, *, start_at: datetime | None, delay_s: float | None
    ) -> Statement[RescheduleRow]:
        """At ``start_at``, or ``delay_s`` from the database's now."""
        params = {"id": run_id, "start_at": start_at, "delay_s": delay_s}
        return self._statement("reschedule_run", params, lambda row: RescheduleRow(**row))

    def retry(self, run_id: int) -> Statement[RetryRow]:
        return self._statement("retry_run", {"id": run_id}, lambda row: RetryRow(**row))

    def insert_failed(self, run: FailedRun) -> Statement[int]:
        params = {
            "environment": run.environment,
            "queue": run.queue,
            "task": run.task,
            "payload": run.payload,
            "max_attempts": run.max_attempts,
            "tags": run.tags,
            "metadata": run.metadata,
            "machine": run.machine,
            "parent_run_id": run.parent_run_id,
            "code": run.code,
            "message": run.message,
        }
        return self._statement("insert_failed_run", params, scalar)

    def matching_ids(self, query: RunQuery) -> Statement[int]:
        """A page of matching ids (``limit`` is the page size)."""
        return self._statement("matching_run_ids", _filter(query, paged=True), scalar)

    def count_matching(self, query: RunQuery) -> Statement[int]:
        """How many runs ``matching_ids`` would page through (``limit`` is not used)."""
        return self._statement("count_matching_runs", _filter(query, paged=False), scalar)

    def retry_many(self, ids: Sequence[int]) -> Statement[BulkRow]:
        def bulk_row(row: Row) -> BulkRow:
            return BulkRow(row["id"], row["previous_status"], row["retried"], row["size_limit"])

        return self._statement("retry_runs", {"ids": list(ids)}, bulk_row)

    def cancel_many(self, ids: Sequence[int]) -> Statement[BulkRow]:
        return self._statement(
            "cancel_runs",
            {"ids": list(ids)},
            lambda row: BulkRow(row["id"], row["previous_status"], row["canceled"]),
        )


def _filter(query: RunQuery, *, paged: bool) -> dict[str, Any]:
    """The parameters of runs_matching (sql/runs/filter.sql), and the page size when paged."""
    params: dict[str, Any] = {
        "environment": query.environment,
        "queue": query.queue,
        "task": query.task,
        "statuses": query.statuses,
        "tags": query.tags,
        "batch_id": query.batch_id,
        "idempotency_keys": query.idempotency_keys,
        "before_id": query.before_id,
        "since_s": query.since_s,
        "include_carriers": query.include_carriers,
    }
    if paged:
        params["limit"] = query.limit
    return params
