"""Firing due cron schedules: every worker's periodic loop calls ``fire_due_schedules``.

One transaction takes the due schedules under their row locks (SKIP LOCKED: another worker
takes the others), and for each claims its ticks in ``schedule_fires`` (keyed by schedule and
tick: a tick that fired already is skipped), triggers one run per tick in the same transaction
and moves ``next_fire_at`` on. So every tick fires exactly once, however many workers there
are, and a worker that dies mid-way fires nothing (the transaction rolls back, another worker
fires those ticks).

Catch-up: a tick less than ``CATCH_UP_GRACE_S`` late is fired on its own (a busy worker, a
short pause between ticks); when the next tick is older than that (no worker ran), the ticks
missed are coalesced into one run, for the latest of them, and the schedule goes on from the
next tick after now.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import psycopg

from fairlane.cron.expressions import last_tick, next_tick
from fairlane.engine import engine
from fairlane.engine.cron import DueSchedule
from fairlane.engine.statement import rows_async
from fairlane.errors import FairlaneError
from fairlane.triggering.api import insert_runs_async
from fairlane.triggering.request import TriggerRequest

log = logging.getLogger("fairlane.worker")

CATCH_UP_GRACE_S = 60.0
# Most ticks of one schedule fired by one call (an every-second schedule a minute late).
MAX_TICKS = 120
# Most schedules fired by one call; the rest wait for the next tick of the loop.
MAX_SCHEDULES = 100


def ticks_to_fire(schedule: DueSchedule) -> tuple[list[datetime], datetime]:
    """(the ticks to fire now, the next tick after them)."""
    cron, zone, now = schedule.cron, schedule.timezone, schedule.now
    tick = schedule.next_fire_at
    if tick < now - timedelta(seconds=CATCH_UP_GRACE_S):
        latest = last_tick(cron, zone, now)
        return [latest], next_tick(cron, zone, latest)
    ticks: list[datetime] = []
    while tick <= now and len(ticks) < MAX_TICKS:
        ticks.append(tick)
        tick = next_tick(cron, zone, tick)
    return ticks, tick


def schedule_request(
    task: str, payload: Any, environment: str, options: dict[str, Any], key: str, tick: datetime
) -> TriggerRequest:
    """The run a tick makes: the schedule's options, its metadata marked with the schedule's
    key and the tick."""
    metadata = {**(options.get("metadata") or {}), "schedule": key, "tick": tick.isoformat()}
    return TriggerRequest(
        task, payload, environment=environment, **{**options, "metadata": metadata}
    )


async def fire_due_schedules(
    conn: psycopg.AsyncConnection[Any], schema: str, *, now: datetime | None = None
) -> int:
    """Fire what is due; returns how many runs were made. ``now``: the clock to fire by
    (tests); the database's ``now()`` when None."""
    schedules = engine(schema).cron
    made = 0
    async with conn.transaction():
        for schedule in await rows_async(conn, schedules.lock_due(MAX_SCHEDULES, now)):
            made += await _fire(conn, schema, schedule)
    return made


async def _fire(conn: psycopg.AsyncConnection[Any], schema: str, schedule: DueSchedule) -> int:
    schedules = engine(schema).cron
    try:
        ticks, following = ticks_to_fire(schedule)
    except (FairlaneError, ValueError, KeyError):
        # A cron or time zone edited by hand into something unusable: left for an operator.
        log.exception("schedule %s: cannot compute its ticks; skipped", schedule.key)
        return 0
    fired: list[datetime] = []
    run_ids: list[int | None] = []
    for tick in ticks:
        if not await rows_async(conn, schedules.record_fire(schedule.id, tick)):
            continue  # fired already: never a second run for a tick
        request = schedule_request(
            schedule.task,
            schedule.payload,
            schedule.environment,
            schedule.options,
            schedule.key,
            tick,
        )
        run_id: int | None = None
        try:
            async with conn.transaction():  # a savepoint: a refused trigger takes nothing else
                (run_id,) = await insert_runs_async(conn, [request], schema=schema)
        except FairlaneError as refused:
            # A full queue, a payload no longer valid: the tick is spent without a run.
            log.warning("schedule %s: tick %s made no run: %s", schedule.key, tick, refused)
        fired.append(tick)
        run_ids.append(run_id)
    await rows_async(conn, schedules.fired(schedule.id, fired, run_ids, following))
    return sum(run_id is not None for run_id in run_ids)
