"""Serving and printing the series in Prometheus's text format."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from fairlane.metrics.database import DatabaseCollector
from fairlane.metrics.worker import WorkerMetrics


def database_text(dsn: str | None = None, *, schema: str | None = None) -> str:
    """The database-side series once, as ``fairlane metrics`` prints them."""
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(dsn, schema=schema))
    return generate_latest(registry).decode()


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """A running ``/metrics`` endpoint (a daemon thread): what it serves, and its port."""

    registry: CollectorRegistry
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.server.server_port

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def serve_worker_metrics(
    port: int,
    metrics: WorkerMetrics,
    dsn: str | None = None,
    *,
    schema: str | None = None,
    host: str = "0.0.0.0",
) -> MetricsEndpoint:
    """Serve the worker's own series and the database's at ``http://host:port/metrics``
    (port 0: any free port, ``MetricsEndpoint.port``)."""
    registry = CollectorRegistry()
    registry.register(metrics.registry)
    registry.register(DatabaseCollector(dsn, schema=schema))
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsEndpoint(registry, server, thread)
