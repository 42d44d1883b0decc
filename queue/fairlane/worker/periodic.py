"""Running due periodic jobs (lease reclaim, delayed promotion, ...) from any worker.

Every worker calls ``run_due_periodic_jobs`` (sql/maintenance/runner.sql) on an autocommit
connection; it claims due jobs with SKIP LOCKED and runs each in a transaction of its own, so
each tick runs exactly once however many workers there are, and a slow job holds back no other.
Then it fires the due cron schedules (fairlane.cron.firing), each tick exactly once too;
the schedules the worker's tasks declare are created when the loop starts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from fairlane import schedules
from fairlane.connection import Outage
from fairlane.cron.firing import fire_due_schedules
from fairlane.engine import engine
from fairlane.engine.cron import ScheduleValues
from fairlane.engine.maintenance import JobsRan
from fairlane.engine.statement import first_async
from fairlane.worker.connections import LoopConnection
from fairlane.worker.stats import WorkerStats

if TYPE_CHECKING:
    from fairlane.metrics.worker import WorkerMetrics

log = logging.getLogger("fairlane.worker")


async def run_due_jobs(conn: psycopg.AsyncConnection[Any], schema: str) -> JobsRan:
    return await first_async(conn, engine(schema).maintenance.run_due()) or JobsRan({}, {})


async def periodic_loop(
    connection: LoopConnection,
    schema: str,
    stats: WorkerStats,
    *,
    interval: float,
    declared: Sequence[ScheduleValues] = (),
    metrics: WorkerMetrics | None = None,
) -> None:
    """``declared``: the schedules the worker's tasks
    declare, created (or updated) before the first tick. ``metrics`` observes each job this
    worker ran and counts what it repaired."""
    pending = list(declared)
    outage = Outage("periodic jobs", log)
    while True:
        try:
            async with connection.use() as conn:
                if pending:
                    await schedules.declare_async(conn, schema, pending)
                    pending = []
                ran = await run_due_jobs(conn, schema)
                stats.periodic_ticks += len(ran.results)
                if metrics is not None:
                    metrics.periodic_jobs_ran(ran)
                stats.scheduled_runs += await fire_due_schedules(conn, schema)
            outage.recovered()
        except psycopg.Error as error:
            # Retried next tick; logged once per outage.
            outage.failed(error)
            await connection.discard()
        except Exception:
            # A schedule that cannot be fired (a row edited by hand) must not stop the worker.
            log.exception("firing schedules failed; retrying next tick")
        await anyio.sleep(interval)
