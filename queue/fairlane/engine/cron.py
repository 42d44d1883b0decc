"""Cron schedules (sql/cron/schedules.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, scalar
from fairlane.models import Schedule


@dataclass(frozen=True, slots=True)
class DueSchedule:
    id: int
    environment: str
    key: str
    task: str
    cron: str
    timezone: str
    payload: Any
    options: dict[str, Any]
    next_fire_at: datetime
    now: datetime


@dataclass(frozen=True, slots=True)
class ScheduleValues:
    """A schedule as ``upsert_schedule`` writes it: payload and options as JSON text."""

    environment: str
    key: str
    task: str
    cron: str
    timezone: str
    payload: str
    options: str
    declared: bool
    next_fire_at: datetime


def _schedule(row: Any) -> Schedule:
    return Schedule(**row)


class Cron(Section):
    def upsert(self, schedule: ScheduleValues) -> Statement[int]:
        """One row: the schedule's id."""
        params = {
            "environment": schedule.environment,
            "key": schedule.key,
            "task": schedule.task,
            "cron": schedule.cron,
            "timezone": schedule.timezone,
            "payload": schedule.payload,
            "options": schedule.options,
            "declared": schedule.declared,
            "next_fire_at": schedule.next_fire_at,
        }
        return self._statement("upsert_schedule", params, scalar)

    def lock_due(self, limit: int, now: datetime | None = None) -> Statement[DueSchedule]:
        """Due by ``now``, or by the transaction's clock when None."""
        return self._statement(
            "lock_due_schedules", {"limit": limit, "now": now}, lambda row: DueSchedule(**row)
        )

    def record_fire(self, schedule_id: int, tick: datetime) -> Statement[int]:
        """One row when the tick is new, none when it fired already."""
        return self._statement(
            "record_schedule_fire", {"schedule_id": schedule_id, "tick": tick}, scalar
        )

    def fired(
        self,
        schedule_id: int,
        ticks: Sequence[datetime],
        run_ids: Sequence[int | None],
        next_fire_at: datetime,
    ) -> Statement[int]:
        params = {
            "schedule_id": schedule_id,
            "ticks": list(ticks),
            "run_ids": list(run_ids),
            "next_fire_at": next_fire_at,
            "last_tick": ticks[-1] if ticks else None,
            "last_run_id": next((r for r in reversed(run_ids) if r is not None), None),
        }
        return self._statement("schedule_fired", params, scalar)

    def list(self, environment: str | None) -> Statement[Schedule]:
        return self._statement("list_schedules", {"environment": environment}, _schedule)

    def get(self, environment: str, key: str) -> Statement[Schedule]:
        return self._statement("get_schedule", {"environment": environment, "key": key}, _schedule)

    def set_paused(
        self, environment: str, key: str, paused: bool, next_fire_at: datetime | None
    ) -> Statement[int]:
        params = {
            "environment": environment,
            "key": key,
            "paused": paused,
            "next_fire_at": next_fire_at,
        }
        return self._statement("set_schedule_paused", params, scalar)

    def delete(self, environment: str, key: str) -> Statement[int]:
        return self._statement("delete_schedule", {"environment": environment, "key": key}, scalar)

    def fire_ticks(self, schedule_id: int) -> Statement[tuple[datetime, int | None]]:
        return self._statement(
            "schedule_fire_ticks",
            {"schedule_id": schedule_id},
            lambda row: (row["tick"], row["run_id"]),
        )
