"""The periodic-job runner and the settings table (sql/maintenance/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, scalar
from fairlane.models import PeriodicJob, Setting


@dataclass(frozen=True, slots=True)
class JobsRan:
    """What one call of the runner did: each job's result and how long it took, by name."""

    results: dict[str, Any]
    seconds: dict[str, float]


def _jobs_ran(row: Row) -> JobsRan:
    took = row["took"] or {}
    return JobsRan(dict(row["ran"] or {}), {name: float(s) for name, s in took.items()})


class Maintenance(Section):
    def run_due(self) -> Statement[JobsRan]:
        """Every due job once, each in a transaction of its own: on an autocommit connection."""
        return self._statement("run_due_periodic_jobs", None, _jobs_ran)

    def run_one(self, name: str) -> Statement[Any]:
        """The job's result; None when it was not due or another session holds it."""
        return self._statement("run_periodic_job", {"name": name}, scalar)

    def jobs(self) -> Statement[PeriodicJob]:
        return self._statement("list_periodic_jobs", None, lambda row: PeriodicJob(**row))

    def make_due(self, name: str) -> Statement[str]:
        """A row (the job's name) when the job exists."""
        return self._statement("make_periodic_job_due", {"name": name}, scalar)

    def configure(
        self, name: str, interval_s: float | None, enabled: bool | None
    ) -> Statement[str]:
        """A row (the job's name) when the job exists."""
        params = {"name": name, "interval_s": interval_s, "enabled": enabled}
        return self._statement("configure_periodic_job", params, scalar)

    def settings(self) -> Statement[Setting]:
        return self._statement("list_settings", None, lambda row: Setting(**row))

    def set_setting(self, name: str, value: Any) -> Statement[Setting]:
        """A row when the setting exists."""
        params = {"name": name, "value": json.dumps(value)}
        return self._statement("set_setting", params, lambda row: Setting(**row))
