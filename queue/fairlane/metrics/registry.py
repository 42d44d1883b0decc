"""Series of the workers registry (sql/worker/registry.sql), read with the database series:
the live workers by fairlane version, and the tasks with queued runs that no live worker
serves. The latter's cardinality is bounded: at most ``UNSERVED_SERIES`` task and environment
pairs, those waiting longest."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric

from fairlane.engine import engine
from fairlane.engine.statement import rows
from fairlane.models import UnservedTask, WorkerInfo

UNSERVED_SERIES = 20


@dataclass(frozen=True, slots=True)
class RegistrySeries:
    workers: list[WorkerInfo]
    unserved: list[UnservedTask]
    read_at: datetime


def read_registry(conn: psycopg.Connection[Any], schema: str) -> RegistrySeries:
    workers = engine(schema).workers
    return RegistrySeries(
        rows(conn, workers.list()),
        rows(conn, workers.unserved(UNSERVED_SERIES)),
        datetime.now(UTC),
    )


def registry_families(series: RegistrySeries) -> list[Metric]:
    live = GaugeMetricFamily(
        "fairlane_workers_live",
        "Registered workers seen within their bound and not stopping, by fairlane version",
        labels=["version"],
    )
    versions = Counter(w.version for w in series.workers if w.live and not w.stopping)
    for version, workers in sorted(versions.items()):
        live.add_metric([version], workers)
    registered = GaugeMetricFamily(
        "fairlane_workers_registered", "Rows of the workers registry, live or not"
    )
    registered.add_metric([], len(series.workers))
    unserved = GaugeMetricFamily(
        "fairlane_unserved_task_oldest_queued_seconds",
        "Tasks with queued runs that no live worker serves: how long the oldest has been"
        f" queued (the {UNSERVED_SERIES} waiting longest)",
        labels=["environment", "task"],
    )
    for task in series.unserved:
        waited = (series.read_at - task.oldest_queued_at).total_seconds()
        unserved.add_metric([task.environment, task.task], max(waited, 0.0))
    tasks = GaugeMetricFamily(
        "fairlane_unserved_tasks",
        f"Tasks with queued runs that no live worker serves (counted up to {UNSERVED_SERIES})",
    )
    tasks.add_metric([], len(series.unserved))
    return [live, registered, unserved, tasks]
