"""Serving and printing the series in Prometheus's text format."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from fairlane.metrics.database import DatabaseCollector
from fairlane.metrics.worker import WorkerCollector
from fairlane.worker.stats import WorkerStats


def database_text(dsn: str | None = None, *, schema: str | None = None) -> str:
    """The database-side series once, as ``fairlane metrics`` prints them."""
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(dsn, schema=schema))
    return generate_latest(registry).decode()


def serve_worker_metrics(
    port: int, stats: WorkerStats, worker_id: str, dsn: str | None = None, *,
    schema: str | None = None, host: str = "0.0.0.0",
) -> CollectorRegistry:  # fmt: skip
    """An HTTP endpoint (a daemon thread) serving the worker's counters and the database's
    series at ``/metrics``."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(stats, worker_id))
    registry.register(DatabaseCollector(dsn, schema=schema))
    start_http_server(port, addr=host, registry=registry)
    return registry
