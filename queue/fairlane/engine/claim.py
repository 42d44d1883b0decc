"""The claim (sql/claim/) and whether due DELAYED runs wait only for their promotion
(sql/worker/idle.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fairlane.engine.rows import ClaimRow, claimed_from_row
from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, scalar

# The claim's floors: environments, queues, queue orders and run ids, one element per queue.
ClaimFloorArrays = tuple[list[str], list[str], list[datetime], list[int]]


class Claim(Section):
    def runs(
        self,
        limit: int,
        *,
        lease_s: float,
        worker_id: str,
        environments: Sequence[str] | None,
        queues: Sequence[str] | None,
        full_scan: bool,
        floors: ClaimFloorArrays | None = None,
        tasks: Sequence[str] | None = None,
        announced: Sequence[str] | None = None,
        last_yield: float | None = None,
        turn_start: str | None = None,
    ) -> Statement[ClaimRow]:
        """``floors``: where each queue's walk starts, as four parallel arrays (environments,
        queues, queue orders, run ids); see sql/claim/claim.sql. ``tasks``: only runs of these
        tasks (None: of any task). ``announced``: environments said to have gained work, looked
        at before serving (without a full scan). ``last_yield``: runs per environment the
        caller's last claim got, which sizes the first page of the turn order read.
        ``turn_start``: where the caller's last claim found the turn order's first environment
        (the last row's ``first_turn``), where this one starts reading it."""
        floor_environments, floor_queues, floor_orders, floor_ids = floors or (None,) * 4
        params = {
            "limit": limit,
            "lease_s": lease_s,
            "worker_id": worker_id,
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None,
            "full_scan": full_scan,
            "floor_environments": floor_environments,
            "floor_queues": floor_queues,
            "floor_orders": floor_orders,
            "floor_ids": floor_ids,
            "tasks": list(tasks) if tasks is not None else None,
            "announced": list(announced) if announced else None,
            "last_yield": last_yield,
            "turn_start": turn_start,
        }
        return self._statement("claim_runs", params, claimed_from_row)

    def due_delayed(
        self,
        environments: Sequence[str] | None,
        queues: Sequence[str] | None,
        tasks: Sequence[str] | None = None,
    ) -> Statement[bool]:
        """One row: whether DELAYED runs there (of these tasks) are due and wait only for
        their promotion."""
        params = {
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None,
            "tasks": list(tasks) if tasks is not None else None,
        }
        return self._statement("due_delayed_runs", params, scalar)

    def advance_delayed(
        self, environments: Sequence[str] | None, queues: Sequence[str] | None
    ) -> Statement[int]:
        """For tests: every DELAYED run there becomes due now; how many did."""
        params = {
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None,
        }
        return self._statement("advance_delayed_runs", params, scalar)
