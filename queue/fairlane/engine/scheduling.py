"""The claim and the scheduling settings (sql/scheduling/)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fairlane.engine.rows import claimed_from_row
from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, no_rows, scalar
from fairlane.models import ClaimedRun, EnvironmentSettings, QueueSettings, SchedulerSettings

# The claim's floors: environments, queues, queue orders and run ids, one element per queue.
ClaimFloorArrays = tuple[list[str], list[str], list[datetime], list[int]]


class Scheduling(Section):
    def claim(
        self,
        limit: int,
        *,
        lease_s: float,
        worker_id: str,
        environments: Sequence[str] | None,
        queues: Sequence[str] | None,
        full_scan: bool,
        floors: ClaimFloorArrays | None = None,
    ) -> Statement[ClaimedRun]:
        """``floors``: where each queue's walk starts, as four parallel arrays (environments,
        queues, queue orders, run ids); see sql/scheduling/claim.sql."""
        floor_environments, floor_queues, floor_orders, floor_ids = floors or (None,) * 4
        params = {
            "limit": limit, "lease_s": lease_s, "worker_id": worker_id,
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None, "full_scan": full_scan,
            "floor_environments": floor_environments, "floor_queues": floor_queues,
            "floor_orders": floor_orders, "floor_ids": floor_ids,
        }  # fmt: skip
        return self._statement("claim_runs", params, claimed_from_row)

    def due_delayed(
        self, environments: Sequence[str] | None, queues: Sequence[str] | None
    ) -> Statement[bool]:
        """One row: whether DELAYED runs there are due and wait only for their promotion
        (sql/worker/idle.sql)."""
        params = {
            "environments": list(environments) if environments else None,
            "queues": list(queues) if queues else None,
        }
        return self._statement("due_delayed_runs", params, scalar)

    def upsert_environment(self, params: dict[str, Any]) -> Statement[EnvironmentSettings]:
        return self._statement(
            "upsert_environment_settings", params, lambda row: EnvironmentSettings(**row)
        )

    def ensure_environment(self, name: str) -> Statement[None]:
        return self._statement("ensure_environment", {"name": name}, no_rows)

    def upsert_queue(self, params: dict[str, Any]) -> Statement[QueueSettings]:
        return self._statement("upsert_queue_settings", params, lambda row: QueueSettings(**row))

    def update_scheduler(self, params: dict[str, Any]) -> Statement[SchedulerSettings]:
        return self._statement(
            "update_scheduler_settings", params, lambda row: SchedulerSettings(**row)
        )

    def scheduler(self) -> Statement[SchedulerSettings]:
        return self._statement("scheduler_settings", None, lambda row: SchedulerSettings(**row))

    def limits_table(self) -> Statement[dict[str, Any]]:
        return self._statement("limits_table", None, _as_dict)


def _as_dict(row: Row) -> dict[str, Any]:
    return dict(row)
