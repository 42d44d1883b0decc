"""Series read from the database at each scrape, by cheap statements on partial indexes
(sql/metrics/series.sql): what every worker of a deployment would report alike, so any one
of them, or ``fairlane metrics``, can serve them. A scrape while the database does not answer
reports ``fairlane_database_up 0`` (and the worker's own series as ever), not an error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.connection import ConnectionOptions, Outage
from fairlane.engine import engine
from fairlane.engine.metrics import JobSeries, QueueSeries
from fairlane.engine.statement import rows
from fairlane.metrics.keys import key_families, read_keys
from fairlane.metrics.registry import read_registry, registry_families

log = logging.getLogger("fairlane.metrics")

# A scrape gives up rather than hang. JIT is off: the series' plans cost enough, past a few
# hundred thousand live runs, for PostgreSQL to compile them, and compiling took longer than
# running them (tests/sql/test_metrics_plan.py holds the plans at a million runs).
SCRAPE_CONNECTION = ConnectionOptions(
    connect_timeout=5,
    statement_timeout=10,
    application_name="fairlane metrics",
    settings={"jit": "off"},
)


def read_series(
    conn: psycopg.Connection[Any], schema: str
) -> tuple[list[QueueSeries], list[JobSeries]]:
    metrics = engine(schema).metrics
    return rows(conn, metrics.queues()), rows(conn, metrics.periodic_jobs())


def families(queues: list[QueueSeries], jobs: list[JobSeries]) -> list[Metric]:
    runs = GaugeMetricFamily(
        "fairlane_runs",
        "Runs that have not ended, by state",
        labels=["environment", "queue", "status"],
    )
    oldest = GaugeMetricFamily(
        "fairlane_queue_oldest_queued_seconds",
        "Age of the run at the head of the queue",
        labels=["environment", "queue"],
    )
    for series in queues:
        labels = [series.environment, series.queue]
        runs.add_metric([*labels, "EXECUTING"], series.executing)
        runs.add_metric([*labels, "QUEUED"], series.queued)
        runs.add_metric([*labels, "DELAYED"], series.delayed)
        oldest.add_metric(labels, series.oldest_queued_s)
    duration = GaugeMetricFamily(
        "fairlane_periodic_job_last_duration_seconds",
        "How long the job's last tick took",
        labels=["job"],
    )
    ticks = CounterMetricFamily(
        "fairlane_periodic_job_runs", "Ticks the job has run, by any session", labels=["job"]
    )
    failing = GaugeMetricFamily(
        "fairlane_periodic_job_failing", "1 when the job's last tick failed", labels=["job"]
    )
    for job in jobs:
        duration.add_metric([job.name], job.last_duration_s)
        ticks.add_metric([job.name], job.run_count)
        failing.add_metric([job.name], 1 if job.failing else 0)
    return [runs, oldest, duration, ticks, failing]


class DatabaseCollector(Collector):
    """Reads the series on its own short connection at every scrape."""

    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        # Logged once when the database stops answering, once when it answers again.
        self.outage = Outage("metrics", log)

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "fairlane_database_up", "1 when the database answered this scrape's statements"
        )
        try:
            with psycopg.connect(self.dsn, **SCRAPE_CONNECTION.kwargs(self.dsn)) as conn:
                queues, jobs = read_series(conn, self.schema)
                keys = read_keys(conn, self.schema)
                registry = read_registry(conn, self.schema)
        except psycopg.Error as error:
            self.outage.failed(error)
            up.add_metric([], 0)
            yield up
            return
        self.outage.recovered()
        up.add_metric([], 1)
        yield up
        yield from families(queues, jobs)
        yield from key_families(keys)
        yield from registry_families(registry)
