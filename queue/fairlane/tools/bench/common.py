"""What every scenario shares: a fresh migrated database, percentiles, one JSON line out."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, TypeVarTuple

import anyio
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fairlane.config import psycopg_dsn
from fairlane.schema import migrate
from fairlane.worker.process import LoopChoice, settle_heap, use_uvloop

log = logging.getLogger("fairlane.tools.bench")

DEFAULT_SERVER_URL = "postgresql://127.0.0.1:5432/postgres"
SCHEMA = "fairlane"


def server_url(explicit: str | None = None) -> str:
    """The server to benchmark: ``--dsn``, else ``DATABASE_URL``, else the local server."""
    return psycopg_dsn(explicit or os.environ.get("DATABASE_URL") or DEFAULT_SERVER_URL)


def database_name(scenario: str) -> str:
    return f"fairlane_bench_{scenario}_{os.getpid()}"


@contextmanager
def fresh_database(server: str, scenario: str, *, keep: bool = False) -> Iterator[str]:
    """CREATE a database for one run, migrate it, yield its DSN, DROP it afterwards.

    ``server`` is any DSN on the server; its database is only used to create and drop ours.
    """
    name = database_name(scenario)
    identifier = sql.Identifier(name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(identifier))
    dsn = make_conninfo(server, dbname=name)
    try:
        started = time.perf_counter()
        migrate.upgrade(dsn, SCHEMA)
        unlimited_new_environments(dsn)
        log.info("database %s created and migrated in %.2fs", name, time.perf_counter() - started)
        yield dsn
    finally:
        if keep:
            log.info("keeping database %s", name)
        else:
            _drop(server, name)


def unlimited_new_environments(dsn: str) -> None:
    """The benches measure the engine without caps unless they set some: environments their
    triggers create get no concurrency limit (the setting's default is the seeds' 100)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.settings SET value = 'null' WHERE name = 'environment_concurrency_limit'"
            ).format(sql.Identifier(SCHEMA))
        )


def _drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        # Give closing connections a moment before forcing them out.
        for _ in range(50):
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
            if not row or not row[0]:
                break
            time.sleep(0.1)
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), like the peer harness."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def latency_figures(ms: list[float], percentiles: tuple[int, ...], digits: int) -> dict[str, float]:
    """``p<N>_ms`` for each percentile, then ``max_ms`` and ``mean_ms``, rounded alike."""
    figures = {f"p{p}_ms": round(percentile(ms, p), digits) for p in percentiles}
    figures["max_ms"] = round(max(ms), digits)
    figures["mean_ms"] = round(sum(ms) / len(ms), digits)
    return figures


T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def run_async(func: Callable[[*Ts], Awaitable[T]], *args: *Ts, loop: LoopChoice = "auto") -> T:
    """``anyio.run`` on the loop `fairlane worker --loop` would take, its heap settled as the
    worker's is."""
    options = {"use_uvloop": use_uvloop(loop)}
    settle_heap()
    return anyio.run(func, *args, backend="asyncio", backend_options=options)


def emit(result: dict[str, Any]) -> None:
    """The scenario's one line on stdout."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def count_statuses(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        sql.SQL("SELECT status, count(*) FROM {}.runs GROUP BY status").format(
            sql.Identifier(SCHEMA)
        )
    ).fetchall()
    return {str(status): int(count) for status, count in rows}
