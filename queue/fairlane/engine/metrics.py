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
class KeySeries:
    environment: str
    queue: str
    concurrency_key: str
    running: int
    queued: int


@dataclass(frozen=True, slots=True)
class JobSeries:
    name: str
    last_duration_s: float
    run_count: int
    failing: bool


def _queue(row: Row) -> QueueSeries:
    return QueueSeries(**row)


def _key(row: Row) -> KeySeries:
    return KeySeries(**row)


def _job(row: Row) -> JobSeries:
    return JobSeries(**row)


class Metrics(Section):
    def queues(self) -> Statement[QueueSeries]:
        return self._statement("queue_series", None, _queue)

    def keys(self, per_queue: int, most: int) -> Statement[KeySeries]:
        """The busiest concurrency keys: at most ``per_queue`` of a queue, ``most`` in all."""
        return self._statement("key_series", {"per_queue": per_queue, "most": most}, _key)

    def periodic_jobs(self) -> Statement[JobSeries]:
        return self._statement("periodic_job_series", None, _job)
