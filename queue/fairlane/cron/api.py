"""The schedule functions that ``fairlane.schedules`` exports, the operations they drive, and
the schedules tasks declare (``declared_params``, ``declare_async``: a worker, when it starts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from fairlane.config import schema_name
from fairlane.cron.expressions import check_cron, next_tick
from fairlane.durations import seconds
from fairlane.engine import engine
from fairlane.engine.cron import ScheduleValues
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import ConfigurationError, ScheduleNotFoundError
from fairlane.models import Schedule
from fairlane.payload import encode_json
from fairlane.triggering.api import insert_runs, insert_runs_async
from fairlane.triggering.request import TriggerRequest, insert_params

if TYPE_CHECKING:
    from fairlane.worker.handles import Task
    from fairlane.worker.registry import TaskRegistry

# The trigger options a schedule keeps for its runs.
OPTIONS = (
    "queue",
    "priority",
    "max_attempts",
    "max_duration",
    "ttl",
    "tags",
    "metadata",
    "machine",
)
DECLARED_PREFIX = "task:"


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigurationError(f"a schedule takes the trigger options {OPTIONS}, not {unknown}")
    kept = {name: value for name, value in options.items() if value is not None}
    for duration in ("max_duration", "ttl"):
        if duration in kept:
            kept[duration] = seconds(duration, kept[duration])
    if "tags" in kept:
        kept["tags"] = list(kept["tags"])
    return kept


def schedule_params(
    task: str | Task[Any, Any],
    cron: str,
    *,
    timezone: str = "UTC",
    key: str,
    payload: Any = None,
    environment: str = "default",
    declared: bool = False,
    now: datetime | None = None,
    **options: Any,
) -> ScheduleValues:
    """The schedule ``upsert_schedule`` writes, every value checked as a trigger checks it."""
    check_cron(cron, timezone)
    if not isinstance(key, str) or not key:
        raise ConfigurationError("a schedule needs a non-empty external_id")
    if not isinstance(task, str):
        payload = task.encode(payload)
        options = {**task.definition.trigger_defaults(), **options}
        task = task.name
    kept = _options(options)
    # A run of this schedule must be one that could be triggered: checked now, not at a tick.
    insert_params([TriggerRequest(task, payload, environment=environment, **kept)])
    return ScheduleValues(
        environment=environment,
        key=key,
        task=task,
        cron=cron,
        timezone=timezone,
        payload=encode_json(payload),
        options=encode_json(kept, what="options"),
        declared=declared,
        next_fire_at=next_tick(cron, timezone, now or datetime.now(UTC)),
    )


def _create(schema: str, schedule: ScheduleValues) -> Operation[Schedule]:
    yield engine(schema).cron.upsert(schedule)
    return (yield from _get(schema, schedule.environment, schedule.key))


def _get(schema: str, environment: str, key: str) -> Operation[Schedule]:
    found = yield engine(schema).cron.get(environment, key)
    if not found:
        raise ScheduleNotFoundError(environment, key)
    return found[0]  # type: ignore[no-any-return]


def _list(schema: str, environment: str | None) -> Operation[list[Schedule]]:
    return (yield engine(schema).cron.list(environment))


def _pause(schema: str, environment: str, key: str, paused: bool) -> Operation[Schedule]:
    schedule = yield from _get(schema, environment, key)
    # Resuming goes on from the next tick after now: the ticks missed while paused are not run.
    following = None if paused else next_tick(schedule.cron, schedule.timezone, datetime.now(UTC))
    yield engine(schema).cron.set_paused(environment, key, paused, following)
    return (yield from _get(schema, environment, key))


def _delete(schema: str, environment: str, key: str) -> Operation[None]:
    if not (yield engine(schema).cron.delete(environment, key)):
        raise ScheduleNotFoundError(environment, key)


def _now_request(schedule: Schedule) -> TriggerRequest:
    from fairlane.cron.firing import schedule_request

    return schedule_request(
        schedule.task,
        schedule.payload,
        schedule.environment,
        schedule.options,
        schedule.key,
        datetime.now(UTC),
    )


Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


# -- async, written once: the sync section below is generated from it ----------------------


async def create_async(
    conn: AsyncConn,
    task: str | Task[Any, Any],
    cron: str,
    timezone: str = "UTC",
    *,
    external_id: str,
    payload: Any = None,
    environment: str = "default",
    schema: str | None = None,
    **options: Any,
) -> Schedule:
    """Create (or update) the schedule ``external_id`` of ``environment``: every tick of
    ``cron`` (5 fields, or 6 with seconds first) in ``timezone`` triggers ``task`` (a name or a
    handle: then its defaults apply and the payload is validated) with ``payload`` and the
    trigger ``options`` (queue, priority, max_attempts, max_duration, ttl, tags, metadata,
    machine). Updating keeps the next tick unless the cron or time zone changed."""
    params = schedule_params(
        task,
        cron,
        timezone=timezone,
        key=external_id,
        payload=payload,
        environment=environment,
        **options,
    )
    return await drive_async(conn, _create(schema_name(schema), params))


async def get_async(
    conn: AsyncConn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    return await drive_async(conn, _get(schema_name(schema), environment, external_id))


async def list_schedules_async(
    conn: AsyncConn, *, environment: str | None = None, schema: str | None = None
) -> list[Schedule]:
    return await drive_async(conn, _list(schema_name(schema), environment))


async def pause_async(
    conn: AsyncConn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    """No tick fires until ``resume_async``; the ticks in between are skipped."""
    return await drive_async(conn, _pause(schema_name(schema), environment, external_id, True))


async def resume_async(
    conn: AsyncConn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    return await drive_async(conn, _pause(schema_name(schema), environment, external_id, False))


async def delete_async(
    conn: AsyncConn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> None:
    await drive_async(conn, _delete(schema_name(schema), environment, external_id))


async def trigger_async(
    conn: AsyncConn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> int:
    """Trigger the schedule's run now, outside its ticks (its next tick is unchanged); returns
    the run id."""
    schedule = await get_async(conn, external_id, environment=environment, schema=schema)
    ids = await insert_runs_async(conn, [_now_request(schedule)], schema=schema)
    return ids[0]


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def create(
    conn: Conn,
    task: str | Task[Any, Any],
    cron: str,
    timezone: str = "UTC",
    *,
    external_id: str,
    payload: Any = None,
    environment: str = "default",
    schema: str | None = None,
    **options: Any,
) -> Schedule:
    """Create (or update) the schedule ``external_id`` of ``environment``: every tick of
    ``cron`` (5 fields, or 6 with seconds first) in ``timezone`` triggers ``task`` (a name or a
    handle: then its defaults apply and the payload is validated) with ``payload`` and the
    trigger ``options`` (queue, priority, max_attempts, max_duration, ttl, tags, metadata,
    machine). Updating keeps the next tick unless the cron or time zone changed."""
    params = schedule_params(
        task,
        cron,
        timezone=timezone,
        key=external_id,
        payload=payload,
        environment=environment,
        **options,
    )
    return drive(conn, _create(schema_name(schema), params))


def get(
    conn: Conn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    return drive(conn, _get(schema_name(schema), environment, external_id))


def list_schedules(
    conn: Conn, *, environment: str | None = None, schema: str | None = None
) -> list[Schedule]:
    return drive(conn, _list(schema_name(schema), environment))


def pause(
    conn: Conn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    """No tick fires until ``resume``; the ticks in between are skipped."""
    return drive(conn, _pause(schema_name(schema), environment, external_id, True))


def resume(
    conn: Conn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> Schedule:
    return drive(conn, _pause(schema_name(schema), environment, external_id, False))


def delete(
    conn: Conn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> None:
    drive(conn, _delete(schema_name(schema), environment, external_id))


def trigger(
    conn: Conn, external_id: str, *, environment: str = "default", schema: str | None = None
) -> int:
    """Trigger the schedule's run now, outside its ticks (its next tick is unchanged); returns
    the run id."""
    schedule = get(conn, external_id, environment=environment, schema=schema)
    ids = insert_runs(conn, [_now_request(schedule)], schema=schema)
    return ids[0]


# -- end of the generated sync section -------------------------------------------------------


# -- declared on tasks ---------------------------------------------------------------------


def declared_params(registry: TaskRegistry) -> list[ScheduleValues]:
    """Every schedule the registry's tasks declare."""
    params = []
    for name in registry.names():
        definition = registry.get(name)
        if definition.cron is None:
            continue
        params.append(
            schedule_params(
                name,
                definition.cron,
                timezone=definition.timezone or "UTC",
                key=f"{DECLARED_PREFIX}{name}",
                declared=True,
                **definition.trigger_defaults(),
            )
        )
    return params


async def declare_async(conn: AsyncConn, schema: str, params: Sequence[ScheduleValues]) -> None:
    """Create or update the declared schedules (a worker, when it starts)."""
    for one in params:
        await drive_async(conn, _create(schema, one))
