"""Turning database rows into the value types of ``models``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairlane.models import ClaimedRun, Run, RunStatus


def run_from_row(row: Sequence[Any]) -> Run:
    """A ``Run`` from a row in the column order of the ``get_run`` statement."""
    (
        id_, environment, queue, task, payload, status, priority, attempts, max_attempts,
        available_at, created_at, started_at, finished_at, lease_token, lease_until, worker_id,
        result, error, tags, metadata, machine, max_duration_s, parent_run_id, idempotency_key,
        idempotency_key_expires_at, queued_at, queue_order,
    ) = row  # fmt: skip
    return Run(
        id=id_, environment=environment, queue=queue, task=task, payload=payload,
        status=RunStatus(status), priority=priority, attempts=attempts,
        max_attempts=max_attempts, available_at=available_at, created_at=created_at,
        started_at=started_at, finished_at=finished_at, lease_token=lease_token,
        lease_until=lease_until, worker_id=worker_id, result=result, error=error,
        tags=list(tags), metadata=metadata, machine=machine, max_duration_s=max_duration_s,
        parent_run_id=parent_run_id, idempotency_key=idempotency_key,
        idempotency_key_expires_at=idempotency_key_expires_at, queued_at=queued_at,
        queue_order=queue_order,
    )  # fmt: skip


def claimed_from_row(row: Sequence[Any]) -> ClaimedRun:
    """A ``ClaimedRun`` from a row of the ``claim_runs`` statement."""
    id_, token, task, payload, attempt, max_attempts, environment, queue, metadata, machine, \
        max_duration_s = row  # fmt: skip
    return ClaimedRun(
        id=id_, lease_token=token, task=task, payload=payload, attempt=attempt,
        max_attempts=max_attempts, environment=environment, queue=queue, metadata=metadata,
        machine=machine, max_duration_s=max_duration_s,
    )  # fmt: skip
