"""Value types shared by the client, the worker and the CLI."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID


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


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run a worker holds under a lease."""

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
