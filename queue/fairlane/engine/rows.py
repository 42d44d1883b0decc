"""Turning database rows into the value types of ``models``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from fairlane.engine.statement import ByColumns
from fairlane.models import AttemptError, ClaimedRun, Run, RunStatus


def run_from_row(row: Mapping[str, Any]) -> Run:
    """A ``Run`` from a row of the ``get_run`` or ``list_runs`` statement."""
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    values["tags"] = list(values["tags"])
    history = values.pop("attempt_errors") or {}
    values["attempt_errors"] = tuple(
        AttemptError(entry["attempt"], datetime.fromisoformat(entry["failed_at"]), entry["error"])
        for entry in history.get("attempts", ())
    )
    values["earlier_attempt_errors"] = int(history.get("earlier", 0))
    return Run(**values)


# A run of a claim, and on the last row alone where the claim found the turn order's first
# environment (sql/claim/claim.sql, first_turn): the worker's next claim starts there.
ClaimRow = tuple[ClaimedRun, str | None]


def _claimed_run(
    id: int,
    lease_token: UUID,
    task: str,
    payload: Any,
    attempts: int,
    max_attempts: int,
    environment: str,
    queue: str,
    metadata: dict[str, Any] | None,
    machine: str | None,
    max_duration_s: float | None,
    queue_order: datetime | None,
    wait_attempt: int,
    replay: bool,
    first_turn: str | None,
) -> ClaimRow:
    # The claim sends empty metadata as NULL (sql/claim/claim.sql); a run's own dict.
    run = ClaimedRun(
        id,
        lease_token,
        task,
        payload,
        attempts,
        max_attempts,
        environment,
        queue,
        {} if metadata is None else metadata,
        machine,
        max_duration_s,
        queue_order,
        wait_attempt,
        replay,
    )
    return run, first_turn


# A ``ClaimRow`` from a row of the ``claim_runs`` statement: the run's fields in order,
# ``attempts`` for ``attempt``, then ``first_turn``.
claimed_from_row = ByColumns(
    (
        "id",
        "lease_token",
        "task",
        "payload",
        "attempts",
        "max_attempts",
        "environment",
        "queue",
        "metadata",
        "machine",
        "max_duration_s",
        "queue_order",
        "wait_attempt",
        "replay",
        "first_turn",
    ),
    _claimed_run,
)
