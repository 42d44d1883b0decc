"""Caps, pauses, size limits and the fair scheduler's settings (sql/limits/limits.sql).

A limit's new value and whether to set it travel apart (``set_limit`` and the value): None is
a value (no limit), so "leave it as it is" needs a flag of its own.
"""

from __future__ import annotations

from typing import Any

from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, no_rows
from fairlane.models import EnvironmentSettings, QueueSettings, SchedulerSettings


class Limits(Section):
    def upsert_environment(
        self,
        name: str,
        *,
        concurrency_limit: int | None,
        set_limit: bool,
        burst_factor: float | None,
        paused: bool | None,
        size_limit: int | None,
        set_size_limit: bool,
    ) -> Statement[EnvironmentSettings]:
        """``burst_factor`` and ``paused``: None leaves them as they are."""
        params = {
            "name": name,
            "concurrency_limit": concurrency_limit,
            "burst_factor": burst_factor,
            "paused": paused,
            "size_limit": size_limit,
            "set_limit": set_limit,
            "set_size_limit": set_size_limit,
        }
        return self._statement(
            "upsert_environment_settings", params, lambda row: EnvironmentSettings(**row)
        )

    def ensure_environment(self, name: str) -> Statement[None]:
        return self._statement("ensure_environment", {"name": name}, no_rows)

    def upsert_queue(
        self,
        environment: str,
        name: str,
        *,
        concurrency_limit: int | None,
        set_limit: bool,
        paused: bool | None,
        size_limit: int | None,
        set_size_limit: bool,
        total_limit: int | None = None,
        set_total_limit: bool = False,
        rate: tuple[int, float, int | None] | None = None,
        set_rate: bool = False,
    ) -> Statement[QueueSettings]:
        """``paused``: None leaves it as it is."""
        params = {
            "environment": environment,
            "name": name,
            "concurrency_limit": concurrency_limit,
            "paused": paused,
            "size_limit": size_limit,
            "set_limit": set_limit,
            "set_size_limit": set_size_limit,
            "total_limit": total_limit,
            "set_total_limit": set_total_limit,
            "rate_limit": rate[0] if rate else None,
            "rate_period_s": rate[1] if rate else None,
            "rate_burst": rate[2] if rate else None,
            "set_rate": set_rate,
        }
        return self._statement("upsert_queue_settings", params, lambda row: QueueSettings(**row))

    def update_scheduler(
        self,
        *,
        quantum: int | None,
        max_deficit: int | None,
        set_global: bool,
        global_concurrency_limit: int | None,
        set_rate: bool,
        rate_limit_per_s: float | None,
        rate_burst: float | None,
    ) -> Statement[SchedulerSettings]:
        """``quantum`` and ``max_deficit``: None leaves them as they are; the rate and its
        burst are set together (``set_rate``)."""
        params = {
            "quantum": quantum,
            "max_deficit": max_deficit,
            "set_global": set_global,
            "global_concurrency_limit": global_concurrency_limit,
            "set_rate": set_rate,
            "rate_limit_per_s": rate_limit_per_s,
            "rate_burst": rate_burst,
        }
        return self._statement(
            "update_scheduler_settings", params, lambda row: SchedulerSettings(**row)
        )

    def scheduler(self) -> Statement[SchedulerSettings]:
        return self._statement("scheduler_settings", None, lambda row: SchedulerSettings(**row))

    def table(self, include_carriers: bool = False) -> Statement[dict[str, Any]]:
        params = {"include_carriers": include_carriers}
        return self._statement("limits_table", params, _as_dict)

    def busiest_keys(self, environment: str, queue: str, most: int) -> Statement[dict[str, Any]]:
        params = {"environment": environment, "queue": queue, "most": most}
        return self._statement("busiest_keys", params, _as_dict)


def _as_dict(row: Row) -> dict[str, Any]:
    return dict(row)
