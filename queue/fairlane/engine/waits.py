"""What a handler's waits run (sql/waitpoints/): edges at a call position, the waitpoints of
awaited runs, time waitpoints, tokens, and giving up or taking back a slot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, no_rows, scalar
from fairlane.models import Token

# Public (fairlane.models); this path keeps working.
from fairlane.models import WaitsOn as WaitsOn


@dataclass(frozen=True, slots=True)
class WaitRow:
    """One edge of a wait and how its waitpoint stands."""

    item: int
    status: str
    is_error: bool
    output: Any
    run_id: int | None


def _position(run_id: int, attempt: int, position: int) -> dict[str, int]:
    return {"run_id": run_id, "attempt": attempt, "position": position}


class Waits(Section):
    def edges_at(self, run_id: int, attempt: int, position: int) -> Statement[int]:
        """Rows: the items of the edges the run's ``attempt`` (its wait attempt) already made
        at this call position (a replay of that attempt finds them)."""
        return self._statement(
            "wait_edges_at", _position(run_id, attempt, position), lambda row: int(row["item"])
        )

    def lock_awaited_runs(self, run_ids: Sequence[int]) -> Statement[None]:
        return self._statement("lock_awaited_runs", {"run_ids": list(run_ids)}, no_rows)

    def runs_in_environment(self, run_ids: Sequence[int], environment: str) -> Statement[int]:
        """Rows: the ids of ``run_ids`` that are runs of ``environment``."""
        params = {"run_ids": list(run_ids), "environment": environment}
        return self._statement("runs_in_environment", params, scalar)

    def ensure_run_waitpoints(self, run_ids: Sequence[int]) -> Statement[tuple[int, int]]:
        """Rows: (run id, its waitpoint id); after ``lock_awaited_runs``."""
        return self._statement(
            "ensure_run_waitpoints",
            {"run_ids": list(run_ids)},
            lambda row: (int(row["run_id"]), int(row["waitpoint_id"])),
        )

    def create_time_waitpoint(self, at: datetime | None, delay_s: float | None) -> Statement[int]:
        return self._statement("create_time_waitpoint", {"at": at, "delay_s": delay_s}, scalar)

    def lock_waitpoints(self, waitpoint_ids: Sequence[int]) -> Statement[int]:
        """Rows: the ids that exist, each locked FOR SHARE."""
        return self._statement("lock_waitpoints", {"waitpoint_ids": list(waitpoint_ids)}, scalar)

    def insert_edges(
        self,
        run_id: int,
        attempt: int,
        position: int,
        items: Sequence[int],
        waitpoint_ids: Sequence[int],
    ) -> Statement[None]:
        params = {
            **_position(run_id, attempt, position),
            "items": list(items),
            "waitpoint_ids": list(waitpoint_ids),
        }
        return self._statement("insert_wait_edges", params, no_rows)

    def begin_waiting(self, run_id: int, token: UUID) -> Statement[str]:
        """WAITING, READY or LOST."""
        return self._statement("begin_waiting", {"run_id": run_id, "token": token}, scalar)

    def resume(self, run_id: int, token: UUID) -> Statement[str]:
        """RESUMED, NO_ROOM, NOT_READY or LOST."""
        return self._statement("resume_run", {"run_id": run_id, "token": token}, scalar)

    def results(self, run_id: int, attempt: int, position: int) -> Statement[WaitRow]:
        return self._statement(
            "wait_results", _position(run_id, attempt, position), lambda row: WaitRow(**row)
        )

    def attach_to_batch(self, batch_id: int, run_id: int) -> Statement[int]:
        return self._statement(
            "attach_batch_waiter", {"batch_id": batch_id, "run_id": run_id}, scalar
        )

    def batch_waitpoint(self, batch_id: int, environment: str) -> Statement[int | None]:
        """The batch's waitpoint, if the batch is ``environment``'s."""
        params = {"batch_id": batch_id, "environment": environment}
        return self._statement("batch_waitpoint", params, scalar)

    def waits_on(self, run_id: int) -> Statement[WaitsOn]:
        return self._statement("run_waits_on", {"run_id": run_id}, lambda row: WaitsOn(**row))

    # -- tokens ---------------------------------------------------------------------------

    def get_token(self, token_id: int) -> Statement[Token]:
        return self._statement("get_token", {"id": token_id}, lambda row: Token(**row))

    def create_token(
        self, key: str | None, key_ttl_s: float, timeout_s: float | None
    ) -> Statement[int]:
        params = {"key": key, "key_ttl_s": key_ttl_s, "timeout_s": timeout_s}
        return self._statement("create_token", params, scalar)

    def complete_token(self, token_id: int, output_json: str) -> Statement[int]:
        """A row (the token's id) when this call completed it."""
        return self._statement(
            "complete_token", {"id": token_id, "output": output_json}, lambda row: int(row["id"])
        )

    def token_timeout_at_most(self, token_id: int, timeout_s: float) -> Statement[None]:
        return self._statement(
            "token_timeout_at_most", {"id": token_id, "timeout_s": timeout_s}, no_rows
        )
