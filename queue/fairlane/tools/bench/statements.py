"""Where a scenario's server time goes: pg_stat_statements, per run.

``--statements`` on a scenario resets the extension's counters of the benchmark's database
before the timed part and reads them after it: for each top-level statement, its execution time,
WAL bytes and records, and buffers touched, each divided by the scenario's runs. The server must
preload the extension (``shared_preload_libraries = 'pg_stat_statements'``); the fresh database
gets ``CREATE EXTENSION`` here.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from fairlane.errors import ConfigurationError

RESET_SQL = """
SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database
                                    WHERE datname = current_database()), 0)
"""

READ_SQL = """
SELECT query, calls, rows, total_exec_time, wal_bytes, wal_records,
       shared_blks_hit + shared_blks_read AS blocks
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND toplevel
ORDER BY total_exec_time DESC
"""

# Statements of the harness itself (the drain's poll, the reset) are left out of the figures.
HARNESS = re.compile(
    r"pg_stat_statements|SELECT EXISTS \(SELECT \S+ FROM \S+\.runs WHERE status|GROUP BY status"
)


class StatementsUnavailable(ConfigurationError):
    """The server does not preload pg_stat_statements."""


def prepare(conn: psycopg.Connection[Any]) -> None:
    """Create the extension in the benchmark's database and check that it collects."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    try:
        conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
    except psycopg.errors.ObjectNotInPrerequisiteState as error:
        raise StatementsUnavailable(
            "--statements needs shared_preload_libraries = 'pg_stat_statements' on the server"
        ) from error


def label(query: str) -> str:
    """A short name for a statement: its first words, whitespace folded."""
    return " ".join(query.split())[:72]


def per_run(conn: psycopg.Connection[Any], runs: int, *, top: int = 8) -> dict[str, Any]:
    """The figures of the top statements by execution time, each per run of the scenario."""
    rows = conn.execute(READ_SQL).fetchall()
    statements: list[dict[str, Any]] = []
    total_us = 0.0
    for query, calls, returned, exec_ms, wal_bytes, wal_records, blocks in rows:
        if HARNESS.search(query):
            continue
        total_us += exec_ms * 1000 / runs
        if len(statements) < top:
            statements.append(
                {
                    "statement": label(query),
                    "calls": calls,
                    "rows": returned,
                    "us_per_run": round(exec_ms * 1000 / runs, 2),
                    "wal_bytes_per_run": round(float(wal_bytes) / runs, 1),
                    "wal_records_per_run": round(wal_records / runs, 2),
                    "blocks_per_run": round(blocks / runs, 2),
                }
            )
    return {"server_us_per_run": round(total_us, 2), "statements": statements}
