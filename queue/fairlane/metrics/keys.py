"""The busiest concurrency keys as series (sql/metrics/series.sql, ``key_series``), read with
the database series. A deployment may hold any number of keys (one per user, say), and a series
per key would grow the scrape and Prometheus with them: the series are the ``KEY_SERIES``
keys holding the most runs (running plus queued), at most ``KEY_SERIES_PER_QUEUE`` of any one
queue, so one hot queue leaves room for the others. Every key of a queue is shown by
``fairlane limits keys``, the API and the dashboard's queue page."""

from __future__ import annotations

from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric

from fairlane.engine import engine
from fairlane.engine.metrics import KeySeries
from fairlane.engine.statement import rows

KEY_SERIES = 20
KEY_SERIES_PER_QUEUE = 5


def read_keys(conn: psycopg.Connection[Any], schema: str) -> list[KeySeries]:
    return rows(conn, engine(schema).metrics.keys(KEY_SERIES_PER_QUEUE, KEY_SERIES))


def key_families(keys: list[KeySeries]) -> list[Metric]:
    runs = GaugeMetricFamily(
        "fairlane_queue_key_runs",
        f"Runs of the busiest concurrency keys, by state (the {KEY_SERIES} keys holding the most"
        f" runs, at most {KEY_SERIES_PER_QUEUE} of a queue)",
        labels=["environment", "queue", "key", "status"],
    )
    for key in keys:
        labels = [key.environment, key.queue, key.concurrency_key]
        runs.add_metric([*labels, "EXECUTING"], key.running)
        runs.add_metric([*labels, "QUEUED"], key.queued)
    return [runs]
