"""Scheduling settings changed at run time: environment and queue caps, pause, DRR knobs,
the global concurrency cap and the global rate limit, and queue and environment size limits.

Each function takes a psycopg connection (sync or async twin) and commits nothing itself: with
an autocommit connection the change applies at once; inside a transaction, at its commit.
Claims read the settings in the claim statement, so a change applies to the next claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.engine.sqlfiles import query
from fairlane.errors import TriggerOptionError

UNCHANGED: Any = object()


@dataclass(frozen=True, slots=True)
class EnvironmentSettings:
    name: str
    concurrency_limit: int | None
    burst_factor: Decimal
    paused: bool
    # Most runs that may wait to start (QUEUED or DELAYED) across its queues; None: unlimited.
    size_limit: int | None = None

    @property
    def cap(self) -> int | None:
        """floor(limit x burst): how many runs of the environment may execute at once."""
        if self.concurrency_limit is None:
            return None
        return int(self.concurrency_limit * self.burst_factor)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    environment: str
    name: str
    concurrency_limit: int | None
    paused: bool
    # Most runs that may wait to start (QUEUED or DELAYED) in it; None: unlimited.
    size_limit: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    quantum: int
    max_deficit: int
    global_concurrency_limit: int | None
    rate_limit_per_s: float | None
    rate_burst: float | None


def _limit(option: str, value: Any) -> tuple[bool, int | None]:
    if value is UNCHANGED:
        return False, None
    if value is not None and (not isinstance(value, int) or value < 0):
        raise TriggerOptionError(option, value, "must be a non-negative integer or None")
    return True, value


def set_environment(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    concurrency_limit: int | None = UNCHANGED,
    burst_factor: float | None = None,
    paused: bool | None = None,
    size_limit: int | None = UNCHANGED,
    schema: str | None = None,
) -> EnvironmentSettings:
    """Change an environment's settings; arguments left out keep their value.

    ``size_limit`` is a hard cap on the runs waiting to start (QUEUED or DELAYED) in all its
    queues together; a trigger past it raises ``QueueSizeLimitExceeded``. None: unlimited.
    """
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_size_limit, size = _limit("size_limit", size_limit)
    if burst_factor is not None and burst_factor < 1:
        raise TriggerOptionError("burst_factor", burst_factor, "must be at least 1")
    params = {
        "name": name, "concurrency_limit": limit, "set_limit": set_limit,
        "burst_factor": burst_factor, "paused": paused, "size_limit": size,
        "set_size_limit": set_size_limit,
    }  # fmt: skip
    row = conn.execute(query("upsert_environment_settings", schema_name(schema)), params).fetchone()
    assert row is not None
    return EnvironmentSettings(*row)


def set_queue(
    conn: psycopg.Connection[Any],
    environment: str,
    name: str,
    *,
    concurrency_limit: int | None = UNCHANGED,
    paused: bool | None = None,
    size_limit: int | None = UNCHANGED,
    schema: str | None = None,
) -> QueueSettings:
    """Change a queue's settings; arguments left out keep their value.

    ``size_limit`` is a hard cap on the queue's runs waiting to start (QUEUED or DELAYED); a
    trigger past it raises ``QueueSizeLimitExceeded``. None: unlimited (the default).
    """
    set_limit, limit = _limit("concurrency_limit", concurrency_limit)
    set_size_limit, size = _limit("size_limit", size_limit)
    target = schema_name(schema)
    conn.execute(query("ensure_environment", target), {"name": environment})
    params = {
        "environment": environment, "name": name, "concurrency_limit": limit,
        "set_limit": set_limit, "paused": paused, "size_limit": size,
        "set_size_limit": set_size_limit,
    }  # fmt: skip
    row = conn.execute(query("upsert_queue_settings", target), params).fetchone()
    assert row is not None
    return QueueSettings(*row)


def set_scheduler(
    conn: psycopg.Connection[Any],
    *,
    quantum: int | None = None,
    max_deficit: int | None = None,
    global_concurrency_limit: int | None = UNCHANGED,
    rate_limit_per_s: float | None = UNCHANGED,
    rate_burst: float | None = None,
    schema: str | None = None,
) -> SchedulerSettings:
    """Change the DRR quantum and max deficit, the global cap or the global rate limit.

    ``rate_limit_per_s=None`` turns the rate limit off; setting it refills the bucket to
    ``rate_burst`` (default: one second's worth of runs).
    """
    set_global, global_limit = _limit("global_concurrency_limit", global_concurrency_limit)
    set_rate = rate_limit_per_s is not UNCHANGED
    if set_rate and rate_limit_per_s is not None and rate_limit_per_s <= 0:
        raise TriggerOptionError("rate_limit_per_s", rate_limit_per_s, "must be positive or None")
    if quantum is not None and quantum < 1:
        raise TriggerOptionError("quantum", quantum, "must be at least 1")
    if max_deficit is not None and max_deficit < 0:
        raise TriggerOptionError("max_deficit", max_deficit, "must be non-negative")
    params = {
        "quantum": quantum, "max_deficit": max_deficit, "set_global": set_global,
        "global_concurrency_limit": global_limit, "set_rate": set_rate,
        "rate_limit_per_s": rate_limit_per_s if set_rate else None,
        "rate_burst": rate_burst if set_rate else None,
    }  # fmt: skip
    row = conn.execute(query("update_scheduler_settings", schema_name(schema)), params).fetchone()
    assert row is not None
    return SchedulerSettings(*row)


def scheduler_settings(
    conn: psycopg.Connection[Any], *, schema: str | None = None
) -> SchedulerSettings:
    row = conn.execute(query("scheduler_settings", schema_name(schema))).fetchone()
    assert row is not None
    return SchedulerSettings(*row)


def limits_table(
    conn: psycopg.Connection[Any], *, schema: str | None = None
) -> list[dict[str, Any]]:
    """Every queue with its caps, size limits and its running, queued and delayed counts."""
    cursor = conn.execute(query("limits_table", schema_name(schema)))
    columns = [column.name for column in cursor.description or []]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
