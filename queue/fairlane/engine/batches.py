"""Batches: creation, items, carriers, reading (sql/batches/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, no_rows, scalar
from fairlane.models import Batch, batch_runs

# Public (fairlane.models); this path keeps working.
from fairlane.models import ItemRow as ItemRow


@dataclass(frozen=True, slots=True)
class CreateRow:
    """CREATED or EXISTING (``batch_id``), RATE_LIMITED (``retry_after_s``, the bucket's
    most in ``limit_value``) or TOO_MANY (the item cap in ``limit_value``)."""

    batch_id: int | None
    outcome: str
    retry_after_s: float | None
    limit_value: float | None


@dataclass(frozen=True, slots=True)
class IngestRow:
    accepted: int
    received: int
    run_count: int
    sealed: bool
    status: str


@dataclass(frozen=True, slots=True)
class LockedItem:
    """The carrier's view of its item, under the item's row lock."""

    state: str
    task: str
    payload: Any
    options: dict[str, Any] | None
    environment: str
    status: str
    parent_run_id: int | None


@dataclass(frozen=True, slots=True)
class ItemColumns:
    """A slice of a batch's items, one array per column (``ingest_batch_items``). Payloads
    and options are JSON text, a payload None for an oversized item; ``made`` and
    ``refusals``, what a handler's own batch did with each item at once, else None."""

    batch_id: int
    indexes: list[int]
    tasks: list[str]
    payloads: list[str | None]
    options: list[str]
    oversized: list[bool]
    made: list[int | None] | None = None
    refusals: list[str | None] | None = None


def _item(batch_id: int, index: int) -> dict[str, int]:
    return {"batch_id": batch_id, "index": index}


class Batches(Section):
    def create(
        self,
        environment: str,
        run_count: int,
        parent_run_id: int | None,
        idempotency_key: str | None,
    ) -> Statement[CreateRow]:
        params = {
            "environment": environment,
            "run_count": run_count,
            "parent_run_id": parent_run_id,
            "idempotency_key": idempotency_key,
        }
        return self._statement("create_batch", params, lambda row: CreateRow(**row))

    def get(self, batch_id: int) -> Statement[Batch]:
        return self._statement("get_batch", {"id": batch_id}, batch_from_row)

    def items(self, batch_id: int) -> Statement[ItemRow]:
        return self._statement("batch_run_ids", {"id": batch_id}, lambda row: ItemRow(**row))

    def ingest(self, items: ItemColumns) -> Statement[IngestRow]:
        params = {
            "batch_id": items.batch_id,
            "indexes": items.indexes,
            "tasks": items.tasks,
            "payloads": items.payloads,
            "options": items.options,
            "oversized": items.oversized,
            "made": items.made,
            "refusals": items.refusals,
        }
        return self._statement("ingest_batch_items", params, lambda row: IngestRow(**row))

    def item_max_bytes(self) -> Statement[int]:
        return self._statement("batch_item_max_bytes", None, scalar)

    def lock_item(self, batch_id: int, index: int, environment: str) -> Statement[LockedItem]:
        """The item, if its batch is ``environment``'s (the carrier's own)."""
        params = {**_item(batch_id, index), "environment": environment}
        return self._statement("lock_batch_item", params, lambda row: LockedItem(**row))

    def skip_item(self, batch_id: int, index: int) -> Statement[None]:
        return self._statement("skip_batch_item", _item(batch_id, index), no_rows)

    def record_item(self, batch_id: int, index: int, run_id: int) -> Statement[bool]:
        params = {**_item(batch_id, index), "run_id": run_id}
        return self._statement("record_batch_item", params, scalar)

    def fail_item(self, batch_id: int, index: int, code: str, message: str) -> Statement[int]:
        params = {**_item(batch_id, index), "code": code, "message": message}
        return self._statement("fail_batch_item", params, scalar)

    def ensure_environment(self, environment: str) -> Statement[None]:
        return self._statement(
            "set_environment_batch_limits", {"environment": environment}, no_rows
        )

    def update_limits(
        self,
        environment: str,
        *,
        refill_amount: float | None,
        refill_interval_s: float | None,
        bucket_max: float | None,
        concurrency: int | None,
    ) -> Statement[int | None]:
        """The environment's overrides of the batch settings (None: the setting's default)."""
        params = {
            "refill_amount": refill_amount,
            "refill_interval_s": refill_interval_s,
            "bucket_max": bucket_max,
            "concurrency": concurrency,
            "environment": environment,
        }
        return self._statement("update_environment_batch_limits", params, scalar)

    def sync_queue_concurrency(self, environment: str, concurrency: int | None) -> Statement[None]:
        params = {"environment": environment, "concurrency": concurrency}
        return self._statement("sync_batch_queue_concurrency", params, no_rows)


def batch_from_row(row: Row, **more: Any) -> Batch:
    """A batch row with its ``run_outcomes`` (``batch_run_outcomes``) as ``Batch.runs``."""
    fields = dict(row, **more)
    outcomes = fields.pop("run_outcomes")
    return Batch(**fields, runs=batch_runs(fields["run_count"], outcomes))
