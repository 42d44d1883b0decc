"""Turning database rows into the value types of ``models``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairlane.engine.statement import ByColumns
from fairlane.models import ClaimedRun, Run, RunStatus


def run_from_row(row: Mapping[str, Any]) -> Run:
    """A ``Run`` from a row of the ``get_run`` or ``list_runs`` statement."""
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    values["tags"] = list(values["tags"])
    return Run(**values)


# A ``ClaimedRun`` from a row of the ``claim_runs`` statement: its fields in order, ``attempts``
# for ``attempt``.
claimed_from_row = ByColumns(
    (
        "id", "lease_token", "task", "payload", "attempts", "max_attempts", "environment",
        "queue", "metadata", "machine", "max_duration_s", "queue_order",
    ),
    ClaimedRun,
)  # fmt: skip
