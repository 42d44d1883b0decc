"""Prometheus metrics: the database-side series (``DatabaseCollector``, what ``fairlane
metrics`` prints and every worker's ``--metrics-port`` serves) and a worker's own counters
(``WorkerCollector``)."""

from fairlane.metrics.database import DatabaseCollector
from fairlane.metrics.exposition import database_text, serve_worker_metrics
from fairlane.metrics.worker import WorkerCollector

__all__ = ["DatabaseCollector", "WorkerCollector", "database_text", "serve_worker_metrics"]
