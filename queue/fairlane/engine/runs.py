"""Runs read and acted on from outside a worker (sql/runs/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


class Runs(Section):
    def get(self, run_id: int) -> Statement[Run]:
        return self._statement("get_run", {"id": run_id}, run_from_row)

    def list(self, filters: dict[str, Any]) -> Statement[Run]:
        """``filters``: the parameters of ``RunFilter.params()``."""
        return self._statement("list_runs", filters, run_from_row)

    def count_by_status(self) -> Statement[tuple[str, int]]:
        return self._statement(
            "count_runs_by_status", None, lambda row: (str(row["status"]), int(row["runs"]))
        )

    def cancel(self, run_id: int) -> Statement[CancelRow]:
        return self._statement("cancel_run", {"id": run_id}, lambda row: CancelRow(**row))

    def reschedule(self, params: dict[str, Any]) -> Statement[RescheduleRow]:
        return self._statement("reschedule_run", params, lambda row: RescheduleRow(**row))

    def retry(self, run_id: int) -> Statement[RetryRow]:
        return self._statement("retry_run", {"id": run_id}, lambda row: RetryRow(**row))

    def insert_failed(self, params: dict[str, Any]) -> Statement[int]:
        return self._statement("insert_failed_run", params, scalar)

    def matching_ids(self, filters: dict[str, Any]) -> Statement[int]:
        """``filters``: ``RunFilter.params()`` (``limit`` is the page size)."""
        return self._statement("matching_run_ids", filters, scalar)

    def retry_many(self, ids: Sequence[int]) -> Statement[BulkRow]:
        def bulk_row(row: Row) -> BulkRow:
            return BulkRow(row["id"], row["previous_status"], row["retried"], row["size_limit"])

        return self._statement("retry_runs", {"ids": list(ids)}, bulk_row)

    def cancel_many(self, ids: Sequence[int]) -> Statement[BulkRow]:
        return self._statement(
            "cancel_runs", {"ids": list(ids)},
            lambda row: BulkRow(row["id"], row["previous_status"], row["canceled"]),
        )  # fmt: skip
