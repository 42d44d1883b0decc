"""Limits changed at run time: environment and queue caps, pause, DRR knobs,
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
Conn = psycopg.Connection[Any]
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
    total_limit: int | None
    rate_limit: int | None
    rate_period_s: float
    rate_burst: int | None


class SchedulerChange(TypedDict, total=False):
    quantum: int | None
    max_deficit: int | None
    global_concurrency_limit: int | None
    rate_limit_per_s: float | None
    rate_burst: float | None


# The columns' ranges: caps, sizes and the DRR knobs are integer; burst_factor numeric(6,2).
INT32_MAX = 2**31 - 1
MAX_BURST_FACTOR = 9999.99
# Runs per second past which a rate is no limit; bounded so the bucket's refill (rate times
# the seconds since the last claim) stays a finite double.
MAX_RATE = 1e9
# A queue's rate period: from a millisecond to a year.
MIN_RATE_PERIOD_S = 0.001
MAX_RATE_PERIOD_S = 366 * 86400.0


def _whole(setting: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT32_MAX:
        raise SettingError(setting, value, f"must be an integer from {low} to {INT32_MAX}")


def _real(setting: str, value: Any, low: float, high: float, *, above: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not low <= value <= high  # NaN too; compared, never made a float
        or (above and value == low)
    ):
        wanted = f"above {low}" if above else f"from {low}"
        raise SettingError(setting, value, f"must be a number {wanted} to {high:g}")


def _limit(setting: str, value: Any) -> tuple[bool, int | None]:
    if value is UNCHANGED:
        return False, None
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX
    ):
        raise SettingError(setting, value, f"must be an integer from 0 to {INT32_MAX}, or None")
    return True, value


def _rate(
    rate_limit: Any, rate_period_s: Any, rate_burst: Any
) -> tuple[bool, tuple[int, float, int | None] | None]:
    """A queue's rate is set whole: ``rate_limit`` runs per ``rate_period_s`` (default 1 s),
    bursts of ``rate_burst`` (default ``rate_limit``); ``rate_limit=None`` turns it off."""
    if rate_limit is UNCHANGED:
        if rate_period_s is not UNCHANGED or rate_burst is not UNCHANGED:
            raise SettingError(
                "rate_limit", None, "is needed with rate_period_s and rate_burst (set whole)"
            )
        return False, None
    if rate_limit is None:
        return True, None
    _whole("rate_limit", rate_limit, 1)
    period = 1.0 if rate_period_s in (UNCHANGED, None) else rate_period_s
    _real("rate_period_s", period, MIN_RATE_PERIOD_S, MAX_RATE_PERIOD_S)
    burst = None if rate_burst is UNCHANGED else rate_burst
    if burst is not None:
        _whole("rate_burst", burst, 1)
    return True, (rate_limit, float(period), burst)


def _environment(
    name: str,
    schema: str | None,
    *,
    concurrency_limit: Any = UNCHANGED,
    burst_factor: float | None = None,
    paused: bool | None = None,
    size_limit: Any = UNCHANGED,
) -> Operation[EnvironmentSettings]:
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_size_limit, size = _limit("size_limit", size_limit)
    if burst_factor is not None:
        _real("burst_factor", burst_factor, 1, MAX_BURST_FACTOR)
    found = yield engine(schema_name(schema)).limits.upsert_environment(
        name,
        concurrency_limit=limit,
        set_limit=set_limit,
        burst_factor=burst_factor,
        paused=paused,
        size_limit=size,
        set_size_limit=set_size_limit,
    )
    return found[0]  # type: ignore[no-any-return]


def _queue(
    environment: str,
    name: str,
    schema: str | None,
    *,
    concurrency_limit: Any = UNCHANGED,
    paused: bool | None = None,
    size_limit: Any = UNCHANGED,
    total_limit: Any = UNCHANGED,
    rate_limit: Any = UNCHANGED,
    rate_period_s: Any = UNCHANGED,
    rate_burst: Any = UNCHANGED,
) -> Operation[QueueSettings]:
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_rate, rate = _rate(rate_limit, rate_period_s, rate_burst)
    set_size_limit, size = _limit("size_limit", size_limit)
    set_total_limit, total = _limit("total_limit", total_limit)
    limits = engine(schema_name(schema)).limits
    yield limits.ensure_environment(environment)
    found = yield limits.upsert_queue(
        environment,
        name,
        concurrency_limit=limit,
        set_limit=set_limit,
        paused=paused,
        size_limit=size,
        set_size_limit=set_size_limit,
        total_limit=total,
        set_total_limit=set_total_limit,
        rate=rate,
        set_rate=set_rate,
    )
    return found[0]  # type: ignore[no-any-return]


def _scheduler(
    schema: str | None,
    *,
    quantum: int | None = None,
    max_deficit: int | None = None,
    global_concurrency_limit: Any = UNCHANGED,
    rate_limit_per_s: Any = UNCHANGED,
    rate_burst: float | None = None,
) -> Operation[SchedulerSettings]:
    set_global, global_limit = _limit("global_concurrency_limit", global_concurrency_limit)
    set_rate = rate_limit_per_s is not UNCHANGED
    if set_rate and rate_limit_per_s is not None:
        _real("rate_limit_per_s", rate_limit_per_s, 0, MAX_RATE, above=True)
    if rate_burst is not None:
        _real("rate_burst", rate_burst, 0, MAX_RATE)
    if quantum is not None:
        _whole("quantum", quantum, 1)
    if max_deficit is not None:
        _whole("max_deficit", max_deficit, 0)
    found = yield engine(schema_name(schema)).limits.update_scheduler(
        quantum=quantum,
        max_deficit=max_deficit,
        set_global=set_global,
        global_concurrency_limit=global_limit,
        set_rate=set_rate,
        rate_limit_per_s=rate_limit_per_s if set_rate else None,
        rate_burst=rate_burst if set_rate else None,
    )
    return found[0]  # type: ignore[no-any-return]


def _read_scheduler(schema: str | None) -> Operation[SchedulerSettings]:
    found = yield engine(schema_name(schema)).limits.scheduler()
    return found[0]  # type: ignore[no-any-return]


def _limits_table(schema: str | None, include_carriers: bool) -> Operation[list[dict[str, Any]]]:
    return (yield engine(schema_name(schema)).limits.table(include_carriers))


def _busiest_keys(
    environment: str, queue: str, most: int, schema: str | None
) -> Operation[list[dict[str, Any]]]:
    _whole("most", most, 1)
    return (yield engine(schema_name(schema)).limits.busiest_keys(environment, queue, most))


# -- async, written once: the sync section below is generated from it ----------------------


async def set_environment_async(
    conn: AsyncConn, name: str, *, schema: str | None = None, **settings: Unpack[EnvironmentChange]
) -> EnvironmentSettings:
    """Change an environment's settings; those left out keep their value.

    ``concurrency_limit`` (int or None), ``burst_factor`` (at least 1), ``paused``, and
    ``size_limit``: a hard cap on the runs waiting to start (QUEUED or DELAYED) in all its
    queues together; a trigger past it raises ``QueueSizeLimitExceeded``. None: unlimited.
    """
    return await drive_async(conn, _environment(name, schema, **settings))


async def set_queue_async(
    conn: AsyncConn,
    environment: str,
    name: str,
    *,
    schema: str | None = None,
    **settings: Unpack[QueueChange],
) -> QueueSettings:
    """Change a queue's settings (``concurrency_limit``, ``paused``, ``size_limit``,
    ``total_limit``, the rate: ``rate_limit``, ``rate_period_s``, ``rate_burst``); those left
    out keep their value. With concurrency keys, ``concurrency_limit`` bounds each key and
    ``total_limit`` the queue across them, and the rate applies to each key (keyless runs share
    one). The queue's size limit caps its runs waiting to start."""
    return await drive_async(conn, _queue(environment, name, schema, **settings))


async def set_scheduler_async(
    conn: AsyncConn, *, schema: str | None = None, **settings: Unpack[SchedulerChange]
) -> SchedulerSettings:
    """Change the DRR ``quantum`` and ``max_deficit``, the ``global_concurrency_limit`` or the
    global rate limit. ``rate_limit_per_s=None`` turns the rate limit off; setting it refills
    the bucket to ``rate_burst`` (default: one second's worth of runs)."""
    return await drive_async(conn, _scheduler(schema, **settings))


async def scheduler_settings_async(
    conn: AsyncConn, *, schema: str | None = None
) -> SchedulerSettings:
    return await drive_async(conn, _read_scheduler(schema))


async def limits_table_async(
    conn: AsyncConn, *, include_carriers: bool = False, schema: str | None = None
) -> list[dict[str, Any]]:
    """Every queue with its caps, size limits and its running, queued and delayed counts; the
    batch carriers' queue (``__batches__``, fairlane's own) only with ``include_carriers``."""
    return await drive_async(conn, _limits_table(schema, include_carriers))


async def busiest_keys_async(
    conn: AsyncConn, environment: str, queue: str, *, most: int = 10, schema: str | None = None
) -> list[dict[str, Any]]:
    """A queue's concurrency keys with the most running runs, then the most queued: at most
    ``most`` rows of ``concurrency_key``, ``running`` and ``queued``."""
    return await drive_async(conn, _busiest_keys(environment, queue, most, schema))


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def set_environment(
    conn: Conn, name: str, *, schema: str | None = None, **settings: Unpack[EnvironmentChange]
) -> EnvironmentSettings:
    """Change an environment's settings; those left out keep their value.

    ``concurrency_limit`` (int or None), ``burst_factor`` (at least 1), ``paused``, and
    ``size_limit``: a hard cap on the runs waiting to start (QUEUED or DELAYED) in all its
    queues together; a trigger past it raises ``QueueSizeLimitExceeded``. None: unlimited.
    """
    return drive(conn, _environment(name, schema, **settings))


def set_queue(
    conn: Conn,
    environment: str,
    name: str,
    *,
    schema: str | None = None,
    **settings: Unpack[QueueChange],
) -> QueueSettings:
    """Change a queue's settings (``concurrency_limit``, ``paused``, ``size_limit``,
    ``total_limit``, the rate: ``rate_limit``, ``rate_period_s``, ``rate_burst``); those left
    out keep their value. With concurrency keys, ``concurrency_limit`` bounds each key and
    ``total_limit`` the queue across them, and the rate applies to each key (keyless runs share
    one). The queue's size limit caps its runs waiting to start."""
    return drive(conn, _queue(environment, name, schema, **settings))


def set_scheduler(
    conn: Conn, *, schema: str | None = None, **settings: Unpack[SchedulerChange]
) -> SchedulerSettings:
    """Change the DRR ``quantum`` and ``max_deficit``, the ``global_concurrency_limit`` or the
    global rate limit. ``rate_limit_per_s=None`` turns the rate limit off; setting it refills
    the bucket to ``rate_burst`` (default: one second's worth of runs)."""
    return drive(conn, _scheduler(schema, **settings))


def scheduler_settings(conn: Conn, *, schema: str | None = None) -> SchedulerSettings:
    return drive(conn, _read_scheduler(schema))


def limits_table(
    conn: Conn, *, include_carriers: bool = False, schema: str | None = None
) -> list[dict[str, Any]]:
    """Every queue with its caps, size limits and its running, queued and delayed counts; the
    batch carriers' queue (``__batches__``, fairlane's own) only with ``include_carriers``."""
    return drive(conn, _limits_table(schema, include_carriers))


def busiest_keys(
    conn: Conn, environment: str, queue: str, *, most: int = 10, schema: str | None = None
) -> list[dict[str, Any]]:
    """A queue's concurrency keys with the most running runs, then the most queued: at most
    ``most`` rows of ``concurrency_key``, ``running`` and ``queued``."""
    return drive(conn, _busiest_keys(environment, queue, most, schema))


# -- end of the generated sync section -------------------------------------------------------
