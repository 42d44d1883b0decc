"""Running due periodic jobs (lease reclaim, delayed promotion, ...) from any worker.

Every worker calls ``run_due_periodic_jobs()``; the function claims due jobs with SKIP LOCKED,
so each tick runs exactly once however many workers there are.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import psycopg

from fairlane.engine.sqlfiles import query
from fairlane.worker.connections import LoopConnection
from fairlane.worker.stats import WorkerStats

log = logging.getLogger("fairlane.worker")


async def run_due_jobs(conn: psycopg.AsyncConnection[Any], schema: str) -> dict[str, Any]:
    cursor = await conn.execute(query("run_due_periodic_jobs", schema))
    row = await cursor.fetchone()
    return dict(row[0]) if row and row[0] else {}


async def periodic_loop(
    connection: LoopConnection, schema: str, stats: WorkerStats, *, interval: float
) -> None:
    while True:
        try:
            ran = await run_due_jobs(await connection.get(), schema)
            stats.periodic_ticks += len(ran)
        except psycopg.Error:
            log.warning("periodic jobs failed; retrying next tick", exc_info=True)
            await connection.discard()
        await anyio.sleep(interval)
