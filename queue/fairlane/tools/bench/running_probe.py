"""During a drain over many environments: whether the caps held.

A probe connection of its own samples, every ``PROBE_S``, the largest number of EXECUTING runs
any one environment (and any one queue) holds, from the held runs' partial index
(runs_held_idx); the drain reports the largest it saw, to compare with ``--env-cap``. A sample
is a snapshot: a cap broken between two samples for less than ``PROBE_S`` can go unseen, so the
figure shows that the caps held at every sampled moment, tens of them a second.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
from psycopg import sql

from fairlane.tools.bench.common import SCHEMA

PROBE_S = 0.01

MOST_RUNNING_SQL = sql.SQL(
    """
SELECT coalesce(max(n) FILTER (WHERE per = 'environment'), 0),
       coalesce(max(n) FILTER (WHERE per = 'queue'), 0)
FROM (SELECT 'environment' AS per, count(*) AS n
      FROM {schema}.runs WHERE status = 'EXECUTING' GROUP BY environment
      UNION ALL
      SELECT 'queue', count(*)
      FROM {schema}.runs WHERE status = 'EXECUTING' GROUP BY environment, queue) AS held
"""
).format(schema=sql.Identifier(SCHEMA))


class RunningProbe:
    """The largest per-environment and per-queue EXECUTING counts seen, and how often it looked."""

    def __init__(self) -> None:
        self.per_environment = 0
        self.per_queue = 0
        self.samples = 0
        self.stopped = False

    async def run(self, dsn: str) -> None:
        """Sample until ``stop``, at least once; on a connection of its own, so the drain's
        polls never wait behind a sample."""
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        async with conn:
            await self.sample(conn)
            while not self.stopped:
                await anyio.sleep(PROBE_S)
                await self.sample(conn)

    async def sample(self, conn: psycopg.AsyncConnection[Any]) -> None:
        cursor = await conn.execute(MOST_RUNNING_SQL)
        row = await cursor.fetchone()
        if row is not None:
            self.per_environment = max(self.per_environment, int(row[0]))
            self.per_queue = max(self.per_queue, int(row[1]))
        self.samples += 1

    def stop(self) -> None:
        self.stopped = True

    def figures(self, cap: int) -> dict[str, Any]:
        return {
            "max_running_per_environment": self.per_environment,
            "max_running_per_queue": self.per_queue,
            "running_samples": self.samples,
            "caps_held": max(self.per_environment, self.per_queue) <= cap,
        }
