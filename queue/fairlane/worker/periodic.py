"""Running due periodic jobs (lease reclaim, delayed promotion, ...) from any worker.

Every worker calls ``run_due_periodic_jobs`` (sql/maintenance/runner.sql) on an autocommit
connection; it claims due jobs with SKIP LOCKED and runs each in a transaction of its own, so
each tick runs exactly once however many workers there are, and a slow job holds back no other.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import psycopg

from fairlane.connection import Outage
from fairlane.engine import engine
from fairlane.engine.statement import first_async
from fairlane.worker.connections import LoopConnection
from fairlane.worker.stats import WorkerStats

log = logging.getLogger("fairlane.worker")


async def run_due_jobs(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    return await first_async(conn, engine(schema).maintenance.run_due()) or {}


async def periodic_loop(
    connection: LoopConnection, schema: str, stats: WorkerStats, *, interval: float
) -> None:
    outage = Outage("periodic jobs", log)
    while True:
        try:
            async with connection.use() as conn:
                ran = await run_due_jobs(conn, schema)
            stats.periodic_ticks += len(ran)
            outage.recovered()
        except psycopg.Error as error:
            # Retried next tick; logged once per outage.
            outage.failed(error)
            await connection.discard()
        await anyio.sleep(interval)
