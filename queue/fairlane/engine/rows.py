"""Turning database rows into the value types of ``models``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairlane.models import ClaimedRun, Run, RunStatus


def run_from_row(row: Mapping[str, Any]) -> Run:
    """A ``Run`` from a row of the ``get_run`` or ``list_runs`` statement."""
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    values["tags"] = list(values["tags"])
    return Run(**values)


def claimed_from_row(row: Mapping[str, Any]) -> ClaimedRun:
    """A ``ClaimedRun`` from a row of the ``claim_runs`` statement."""
    return ClaimedRun(
        id=row["id"], lease_token=row["lease_token"], task=row["task"], payload=row["payload"],
        attempt=row["attempts"], max_attempts=row["max_attempts"],
        environment=row["environment"], queue=row["queue"], metadata=row["metadata"],
        machine=row["machine"], max_duration_s=row["max_duration_s"],
        queue_order=row.get("queue_order"),
    )  # fmt: skip
