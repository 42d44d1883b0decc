"""A run's recorded calls (sql/waitpoints/steps.sql): steps and waits by call position, read
back for a replay, and a waiting run letting go of its worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, no_rows, scalar
from fairlane.models import RunStep


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A call a run recorded, as its replay reads it. For a wait of the current wait attempt,
    ``results`` holds its edges' waitpoints as [item, is_error, output, run id] and
    ``complete`` whether all of them completed."""

    run_id: int
    position: int
    kind: str
    name: str
    attempt: int
    status: str
    result: Any
    error: Any
    results: list[list[Any]] | None
    complete: bool


class Journal(Section):
    def record_step(
        self,
        run_id: int,
        token: UUID,
        position: int,
        name: str,
        attempt: int,
        *,
        status: str,
        result_json: str | None,
        error_json: str | None,
        started_at: datetime,
    ) -> Statement[int]:
        """A row (the position) when written: the run was EXECUTING under ``token``."""
        params = {
            "run_id": run_id,
            "token": token,
            "position": position,
            "name": name,
            "attempt": attempt,
            "status": status,
            "result": result_json,
            "error": error_json,
            "started_at": started_at,
        }
        return self._statement("record_step", params, scalar)

    def record_wait(self, run_id: int, position: int, name: str, attempt: int) -> Statement[None]:
        params = {"run_id": run_id, "position": position, "name": name, "attempt": attempt}
        return self._statement("record_wait", params, no_rows)

    def recorded_calls(self, run_ids: Sequence[int]) -> Statement[RecordedCall]:
        return self._statement(
            "recorded_calls", {"run_ids": list(run_ids)}, lambda row: RecordedCall(**row)
        )

    def run_steps(self, run_id: int) -> Statement[RunStep]:
        return self._statement("run_steps", {"run_id": run_id}, lambda row: RunStep(**row))

    def detach(self, run_id: int, token: UUID) -> Statement[str]:
        """DETACHED, READY or LOST."""
        return self._statement("detach_waiting_run", {"run_id": run_id, "token": token}, scalar)
