"""Periodic maintenance jobs and engine settings, from Python.

Each job is a SQL function of ``sql/maintenance/`` listed in the ``periodic_jobs`` table and
described in ``fairlane.maintenance.jobs``; every worker runs the due ones, each in a
transaction of its own (worker/periodic.py), and ``CALL run_due_periodic_jobs()`` can as well
be run from pg_cron. Functions take a psycopg connection in autocommit mode, sync or (the
``_async`` twin) async.
"""

from __future__ import annotations

from typing import Any

import psycopg

from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.statement import Operation, drive, drive_async
from fairlane.errors import SettingError, UnknownMaintenanceItemError
from fairlane.maintenance.jobs import JOBS, JOBS_BY_NAME, SETTINGS
from fairlane.maintenance.template import JobSpec, SettingSpec
from fairlane.models import PeriodicJob, Setting

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]


def _list_jobs(schema: str | None) -> Operation[list[PeriodicJob]]:
    return (yield engine(schema_name(schema)).maintenance.jobs())


def _run_due(schema: str | None) -> Operation[dict[str, Any]]:
    found = yield engine(schema_name(schema)).maintenance.run_due()
    return found[0].results if found else {}


def _run_now(name: str, schema: str | None) -> Operation[Any]:
    maintenance = engine(schema_name(schema)).maintenance
    if not (yield maintenance.make_due(name)):
        raise UnknownMaintenanceItemError("periodic job", name)
    found = yield maintenance.run_one(name)
    return found[0]


def _configure(
    name: str, interval_s: float | None, enabled: bool | None, schema: str | None
) -> Operation[None]:
    if interval_s is not None and not interval_s > 0:
        raise SettingError("interval_s", interval_s, "must be a positive number of seconds")
    if not (yield engine(schema_name(schema)).maintenance.configure(name, interval_s, enabled)):
        raise UnknownMaintenanceItemError("periodic job", name)


def _list_settings(schema: str | None) -> Operation[list[Setting]]:
    return (yield engine(schema_name(schema)).maintenance.settings())


def _set_setting(name: str, value: Any, schema: str | None) -> Operation[Setting]:
    spec = SETTINGS.get(name)
    if spec is None:
        raise UnknownMaintenanceItemError("setting", name)
    found = yield engine(schema_name(schema)).maintenance.set_setting(name, spec.validate(value))
    if not found:
        raise UnknownMaintenanceItemError("setting", name)
    return found[0]  # type: ignore[no-any-return]


# -- async, written once: the sync section below is generated from it ----------------------


async def list_jobs_async(conn: AsyncConn, *, schema: str | None = None) -> list[PeriodicJob]:
    return await drive_async(conn, _list_jobs(schema))


async def run_due_async(conn: AsyncConn, *, schema: str | None = None) -> dict[str, Any]:
    """Run every due job once, each in its own transaction, as a worker's tick does; returns
    each job's result by name."""
    return await drive_async(conn, _run_due(schema))


async def run_now_async(conn: AsyncConn, name: str, *, schema: str | None = None) -> Any:
    """Run job ``name`` now; its result, or None when a worker holds it at this moment."""
    return await drive_async(conn, _run_now(name, schema))


async def configure_job_async(
    conn: AsyncConn,
    name: str,
    *,
    interval_s: float | None = None,
    enabled: bool | None = None,
    schema: str | None = None,
) -> None:
    await drive_async(conn, _configure(name, interval_s, enabled, schema))


async def list_settings_async(conn: AsyncConn, *, schema: str | None = None) -> list[Setting]:
    return await drive_async(conn, _list_settings(schema))


async def set_setting_async(
    conn: AsyncConn, name: str, value: Any, *, schema: str | None = None
) -> Setting:
    """Set an engine setting; a value out of its range raises ``SettingError`` and changes
    nothing."""
    return await drive_async(conn, _set_setting(name, value, schema))


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def list_jobs(conn: Conn, *, schema: str | None = None) -> list[PeriodicJob]:
    return drive(conn, _list_jobs(schema))


def run_due(conn: Conn, *, schema: str | None = None) -> dict[str, Any]:
    """Run every due job once, each in its own transaction, as a worker's tick does; returns
    each job's result by name."""
    return drive(conn, _run_due(schema))


def run_now(conn: Conn, name: str, *, schema: str | None = None) -> Any:
    """Run job ``name`` now; its result, or None when a worker holds it at this moment."""
    return drive(conn, _run_now(name, schema))


def configure_job(
    conn: Conn,
    name: str,
    *,
    interval_s: float | None = None,
    enabled: bool | None = None,
    schema: str | None = None,
) -> None:
    drive(conn, _configure(name, interval_s, enabled, schema))


def list_settings(conn: Conn, *, schema: str | None = None) -> list[Setting]:
    return drive(conn, _list_settings(schema))


def set_setting(conn: Conn, name: str, value: Any, *, schema: str | None = None) -> Setting:
    """Set an engine setting; a value out of its range raises ``SettingError`` and changes
    nothing."""
    return drive(conn, _set_setting(name, value, schema))


# -- end of the generated sync section -------------------------------------------------------


__all__ = [
    "JOBS",
    "JOBS_BY_NAME",
    "SETTINGS",
    "JobSpec",
    "PeriodicJob",
    "Setting",
    "SettingSpec",
    "configure_job",
    "configure_job_async",
    "list_jobs",
    "list_jobs_async",
    "list_settings",
    "list_settings_async",
    "run_due",
    "run_due_async",
    "run_now",
    "run_now_async",
    "set_setting",
    "set_setting_async",
]
