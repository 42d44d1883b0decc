"""Prometheus metrics: the database-side series (``DatabaseCollector``, what ``fairlane
metrics`` prints and every worker's ``--metrics-port`` serves) and a worker's own
(``WorkerMetrics``, ``Worker.metrics``)."""

from fairlane.metrics.database import DatabaseCollector
from fairlane.metrics.exposition import MetricsEndpoint, database_text, serve_worker_metrics
from fairlane.metrics.worker import WorkerMetrics

__all__ = [
    "DatabaseCollector",
    "MetricsEndpoint",
    "WorkerMetrics",
    "database_text",
    "serve_worker_metrics",
]
