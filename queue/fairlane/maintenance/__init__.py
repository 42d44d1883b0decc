"""Periodic maintenance jobs and engine settings, from Python.

The jobs themselves are SQL functions (sql/maintenance.sql, ttl.sql, sweeper.sql, pruning.sql)
listed in the ``periodic_jobs`` table; every worker runs the due ones (see worker/periodic.py),
and ``run_due_periodic_jobs()`` can as well be called from pg_cron or by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.engine.sqlfiles import query
from fairlane.errors import FairlaneError


class UnknownMaintenanceItemError(FairlaneError):
    """No periodic job or setting has that name."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"no {kind} named {name!r}")


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    name: str
    function: str
    interval_s: float
    enabled: bool
    next_due_at: datetime
    last_started_at: datetime | None
    last_finished_at: datetime | None
    last_result: dict[str, Any] | None
    last_error: str | None
    run_count: int


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    value: Any
    description: str


def list_jobs(conn: psycopg.Connection[Any], *, schema: str | None = None) -> list[PeriodicJob]:
    rows = conn.execute(query("list_periodic_jobs", schema_name(schema))).fetchall()
    return [PeriodicJob(*row) for row in rows]


def run_due(conn: psycopg.Connection[Any], *, schema: str | None = None) -> dict[str, Any]:
    """Run every due job once, as a worker's tick does; returns each job's result."""
    row = conn.execute(query("run_due_periodic_jobs", schema_name(schema))).fetchone()
    return dict(row[0]) if row and row[0] else {}


def run_now(conn: psycopg.Connection[Any], name: str, *, schema: str | None = None) -> Any:
    """Make ``name`` due and run due jobs: the job runs now unless a worker just took it."""
    target = schema_name(schema)
    if conn.execute(query("make_periodic_job_due", target), {"name": name}).rowcount == 0:
        raise UnknownMaintenanceItemError("periodic job", name)
    return run_due(conn, schema=target).get(name)


def configure_job(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    interval_s: float | None = None,
    enabled: bool | None = None,
    schema: str | None = None,
) -> None:
    if interval_s is not None and interval_s <= 0:
        raise ValueError("interval_s must be positive")
    params = {"name": name, "interval_s": interval_s, "enabled": enabled}
    if conn.execute(query("configure_periodic_job", schema_name(schema)), params).rowcount == 0:
        raise UnknownMaintenanceItemError("periodic job", name)


def list_settings(conn: psycopg.Connection[Any], *, schema: str | None = None) -> list[Setting]:
    rows = conn.execute(query("list_settings", schema_name(schema))).fetchall()
    return [Setting(*row) for row in rows]


def set_setting(
    conn: psycopg.Connection[Any], name: str, value: Any, *, schema: str | None = None
) -> Setting:
    params = {"name": name, "value": json.dumps(value)}
    row = conn.execute(query("set_setting", schema_name(schema)), params).fetchone()
    if row is None:
        raise UnknownMaintenanceItemError("setting", name)
    return Setting(*row)
