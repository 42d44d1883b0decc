"""The database-side metric series (sql/metrics/series.sql)."""

from __future__ import annotations

from dataclasses import dataclass

from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement


@dataclass(frozen=True, slots=True)
class QueueSeries:
    environment: str
    queue: str
    executing: int
    queued: int
    delayed: int
    oldest_queued_s: float


@dataclass(frozen=True, slots=True)
class JobSeries:
    name: str
    last_duration_s: float
    run_count: int
    failing: bool


def _queue(row: Row) -> QueueSeries:
    return QueueSeries(**row)


def _job(row: Row) -> JobSeries:
    return JobSeries(**row)


class Metrics(Section):
    def queues(self) -> Statement[QueueSeries]:
        return self._statement("queue_series", None, _queue)

    def periodic_jobs(self) -> Statement[JobSeries]:
        return self._statement("periodic_job_series", None, _job)
