"""Scheduling settings changed at run time: environment and queue caps, pause, DRR knobs,
the global concurrency cap and the global rate limit, and queue and environment size limits.

Each function takes a psycopg connection, sync or (the ``_async`` twin) async, and commits
nothing itself: with an autocommit connection the change applies at once; inside a
transaction, at its commit. Claims read the settings in the claim statement, so a change
applies to the next claim. A value out of range raises ``SettingError`` before anything is
sent.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

import psycopg

from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import SettingError
from fairlane.models import EnvironmentSettings, QueueSettings, SchedulerSettings

UNCHANGED: Any = object()
SyncConn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


class EnvironmentChange(TypedDict, total=False):
    concurrency_limit: int | None
    burst_factor: float | None
    paused: bool | None
    size_limit: int | None


class QueueChange(TypedDict, total=False):
    concurrency_limit: int | None
    paused: bool | None
    size_limit: int | None


class SchedulerChange(TypedDict, total=False):
    quantum: int | None
    max_deficit: int | None
    global_concurrency_limit: int | None
    rate_limit_per_s: float | None
    rate_burst: float | None


def _limit(setting: str, value: Any) -> tuple[bool, int | None]:
    if value is UNCHANGED:
        return False, None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise SettingError(setting, value, "must be a non-negative integer or None")
    return True, value


def _environment(
    name: str, schema: str | None, *, concurrency_limit: Any = UNCHANGED,
    burst_factor: float | None = None, paused: bool | None = None, size_limit: Any = UNCHANGED,
) -> Operation[EnvironmentSettings]:  # fmt: skip
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_size_limit, size = _limit("size_limit", size_limit)
    if burst_factor is not None and burst_factor < 1:
        raise SettingError("burst_factor", burst_factor, "must be at least 1")
    params = {
        "name": name, "concurrency_limit": limit, "set_limit": set_limit,
        "burst_factor": burst_factor, "paused": paused, "size_limit": size,
        "set_size_limit": set_size_limit,
    }  # fmt: skip
    found = yield engine(schema_name(schema)).scheduling.upsert_environment(params)
    return found[0]  # type: ignore[no-any-return]


def _queue(
    environment: str, name: str, schema: str | None, *, concurrency_limit: Any = UNCHANGED,
    paused: bool | None = None, size_limit: Any = UNCHANGED,
) -> Operation[QueueSettings]:  # fmt: skip
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_size_limit, size = _limit("size_limit", size_limit)
    scheduling = engine(schema_name(schema)).scheduling
    yield scheduling.ensure_environment(environment)
    params = {
        "environment": environment, "name": name, "concurrency_limit": limit,
        "set_limit": set_limit, "paused": paused, "size_limit": size,
        "set_size_limit": set_size_limit,
    }  # fmt: skip
    found = yield scheduling.upsert_queue(params)
    return found[0]  # type: ignore[no-any-return]


def _scheduler(
    schema: str | None, *, quantum: int | None = None, max_deficit: int | None = None,
    global_concurrency_limit: Any = UNCHANGED, rate_limit_per_s: Any = UNCHANGED,
    rate_burst: float | None = None,
) -> Operation[SchedulerSettings]:  # fmt: skip
    set_global, global_limit = _limit("global_concurrency_limit", global_concurrency_limit)
    set_rate = rate_limit_per_s is not UNCHANGED
    if set_rate and rate_limit_per_s is not None and rate_limit_per_s <= 0:
        raise SettingError("rate_limit_per_s", rate_limit_per_s, "must be positive or None")
    if quantum is not None and quantum < 1:
        raise SettingError("quantum", quantum, "must be at least 1")
    if max_deficit is not None and max_deficit < 0:
        raise SettingError("max_deficit", max_deficit, "must be non-negative")
    params = {
        "quantum": quantum, "max_deficit": max_deficit, "set_global": set_global,
        "global_concurrency_limit": global_limit, "set_rate": set_rate,
        "rate_limit_per_s": rate_limit_per_s if set_rate else None,
        "rate_burst": rate_burst if set_rate else None,
    }  # fmt: skip
    found = yield engine(schema_name(schema)).scheduling.update_scheduler(params)
    return found[0]  # type: ignore[no-any-return]


def _read_scheduler(schema: str | None) -> Operation[SchedulerSettings]:
    found = yield engine(schema_name(schema)).scheduling.scheduler()
    return found[0]  # type: ignore[no-any-return]


def _limits_table(schema: str | None) -> Operation[list[dict[str, Any]]]:
    return (yield engine(schema_name(schema)).scheduling.limits_table())


# -- sync ------------------------------------------------------------------------------------


def set_environment(
    conn: SyncConn, name: str, *, schema: str | None = None, **settings: Unpack[EnvironmentChange]
) -> EnvironmentSettings:
    """Change an environment's settings; those left out keep their value.

    ``concurrency_limit`` (int or None), ``burst_factor`` (at least 1), ``paused``, and
    ``size_limit``: a hard cap on the runs waiting to start (QUEUED or DELAYED) in all its
    queues together; a trigger past it raises ``QueueSizeLimitExceeded``. None: unlimited.
    """
    return drive(conn, _environment(name, schema, **settings))


def set_queue(
    conn: SyncConn,
    environment: str,
    name: str,
    *,
    schema: str | None = None,
    **settings: Unpack[QueueChange],
) -> QueueSettings:
    """Change a queue's settings (``concurrency_limit``, ``paused``, ``size_limit``); those
    left out keep their value. The queue's size limit caps its runs waiting to start."""
    return drive(conn, _queue(environment, name, schema, **settings))


def set_scheduler(
    conn: SyncConn, *, schema: str | None = None, **settings: Unpack[SchedulerChange]
) -> SchedulerSettings:
    """Change the DRR ``quantum`` and ``max_deficit``, the ``global_concurrency_limit`` or the
    global rate limit. ``rate_limit_per_s=None`` turns the rate limit off; setting it refills
    the bucket to ``rate_burst`` (default: one second's worth of runs)."""
    return drive(conn, _scheduler(schema, **settings))


def scheduler_settings(conn: SyncConn, *, schema: str | None = None) -> SchedulerSettings:
    return drive(conn, _read_scheduler(schema))


def limits_table(conn: SyncConn, *, schema: str | None = None) -> list[dict[str, Any]]:
    """Every queue with its caps, size limits and its running, queued and delayed counts."""
    return drive(conn, _limits_table(schema))


# -- async -----------------------------------------------------------------------------------


async def set_environment_async(
    conn: AsyncConn, name: str, *, schema: str | None = None, **settings: Unpack[EnvironmentChange]
) -> EnvironmentSettings:
    return await drive_async(conn, _environment(name, schema, **settings))


async def set_queue_async(
    conn: AsyncConn,
    environment: str,
    name: str,
    *,
    schema: str | None = None,
    **settings: Unpack[QueueChange],
) -> QueueSettings:
    return await drive_async(conn, _queue(environment, name, schema, **settings))


async def set_scheduler_async(
    conn: AsyncConn, *, schema: str | None = None, **settings: Unpack[SchedulerChange]
) -> SchedulerSettings:
    return await drive_async(conn, _scheduler(schema, **settings))


async def scheduler_settings_async(
    conn: AsyncConn, *, schema: str | None = None
) -> SchedulerSettings:
    return await drive_async(conn, _read_scheduler(schema))


async def limits_table_async(conn: AsyncConn, *, schema: str | None = None) -> list[dict[str, Any]]:
    return await drive_async(conn, _limits_table(schema))
