"""Runs with concurrency keys, written set-based (one INSERT whatever the number of keys), for
the tests of where keys are shown: the dashboard's queue page, the API, the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

# Each key's runs: EXECUTING ones (started, under a lease, as a claim leaves them), then
# QUEUED ones.
FILL = """
INSERT INTO fairlane.runs (environment, queue, task, payload, status, concurrency_key, attempts,
                          started_at, lease_token, lease_until, worker_id)
SELECT %(environment)s, %(queue)s, 'work', '{}', held.status, k.key,
       CASE WHEN held.status = 'EXECUTING' THEN 1 ELSE 0 END,
       CASE WHEN held.status = 'EXECUTING' THEN now() END,
       CASE WHEN held.status = 'EXECUTING' THEN gen_random_uuid() END,
       CASE WHEN held.status = 'EXECUTING' THEN now() + interval '1 hour' END,
       CASE WHEN held.status = 'EXECUTING' THEN 'w' END
FROM unnest(%(keys)s::text[], %(running)s::int[], %(queued)s::int[]) AS k(key, running, queued)
CROSS JOIN LATERAL (
    SELECT 'EXECUTING' AS status FROM generate_series(1, k.running)
    UNION ALL
    SELECT 'QUEUED' FROM generate_series(1, k.queued)
) AS held
"""


def add_keys(
    db: psycopg.Connection[Any],
    environment: str,
    queue: str,
    keys: Sequence[tuple[str, int, int]],
) -> None:
    """The runs of ``keys`` (each ``(key, running, queued)``) in the queue, with the
    environment's and queue's rows."""
    db.execute(
        "INSERT INTO fairlane.environments (name) VALUES (%s) ON CONFLICT DO NOTHING",
        (environment,),
    )
    db.execute(
        "INSERT INTO fairlane.queues (environment, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (environment, queue),
    )
    db.execute(
        FILL,
        {
            "environment": environment,
            "queue": queue,
            "keys": [key for key, _, _ in keys],
            "running": [running for _, running, _ in keys],
            "queued": [queued for _, _, queued in keys],
        },
    )
