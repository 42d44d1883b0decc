"""drain ``--sizes``: how much room the runs table takes before a drain, after it, and after
the maintenance that follows it.

Reported in bytes: the table (heap, TOAST and their maps: ``pg_table_size``) and its indexes
(``pg_indexes_size``), at four moments: with the backlog queued (``before``), once it is drained
(``drained``), after a VACUUM with every finished run kept as history (``vacuumed``: what
autovacuum leaves), and after pruning every finished run (retention 0, the pruning job run
until it finds nothing) and a VACUUM (``pruned``).

The maintenance starts once no other session is connected to the benchmark's database: a
stopped worker's server sessions can outlive its connections for a moment, and one still there
holds locks a VACUUM waits out (it leaves the table's empty end in place rather than wait) or
the pruning job itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from fairlane.maintenance import run_now, set_setting
from fairlane.tools.bench.common import SCHEMA

SIZES_SQL = f"""
SELECT pg_table_size('{SCHEMA}.runs') AS table_bytes,
       pg_indexes_size('{SCHEMA}.runs') AS index_bytes
"""


def sizes_of(row: tuple[Any, ...] | None) -> dict[str, int]:
    table_bytes, index_bytes = row or (0, 0)
    return {"table_bytes": int(table_bytes), "index_bytes": int(index_bytes)}


# -- async, written once: the sync section below is generated from it ----------------------


async def measure_async(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    cursor = await conn.execute(SIZES_SQL)
    return sizes_of(await cursor.fetchone())


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def measure(conn: psycopg.Connection[Any]) -> dict[str, int]:
    cursor = conn.execute(SIZES_SQL)
    return sizes_of(cursor.fetchone())


# -- end of the generated sync section -------------------------------------------------------


# How long the maintenance waits for other sessions to leave and for a held pruning job.
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.05

OTHER_SESSIONS_SQL = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def after_maintenance(dsn: str) -> dict[str, dict[str, int]]:
    """``vacuumed`` and ``pruned`` (the database is the benchmark's own: its settings change)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _wait_alone(conn)
        conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.runs")
        vacuumed = measure(conn)
        set_setting(conn, "prune_retention_s", 0, schema=SCHEMA)
        _prune_everything(conn)
        conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.runs")
        pruned = measure(conn)
    return {"vacuumed": vacuumed, "pruned": pruned}


def _wait_alone(conn: psycopg.Connection[Any]) -> None:
    def alone() -> bool:
        row = conn.execute(OTHER_SESSIONS_SQL).fetchone()
        return row is None or row[0] == 0

    _wait_for(alone, "other sessions stayed on the benchmark's database")


def _prune_everything(conn: psycopg.Connection[Any]) -> None:
    """Pruning ticks until one deletes nothing. A tick another session holds (``run_now``
    gives None) is not an empty one: it is waited for."""
    outcome: Any = None

    def ran() -> bool:
        nonlocal outcome
        outcome = run_now(conn, "prune_finished_runs", schema=SCHEMA)
        return outcome is not None

    while True:
        _wait_for(ran, "the pruning job stayed held by another session")
        if not _pruned_rows(outcome):
            return


def _wait_for(ready: Callable[[], bool], failure: str) -> None:
    """Poll ``ready`` until it holds; raise after ``SETTLE_TIMEOUT_S``."""
    give_up_at = time.monotonic() + SETTLE_TIMEOUT_S
    while not ready():
        if time.monotonic() > give_up_at:
            raise RuntimeError(f"{failure} for {SETTLE_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def _pruned_rows(outcome: Any) -> int:
    """Runs a pruning tick deleted (its outcome is a JSON object with ``deleted``)."""
    if isinstance(outcome, dict):
        return int(outcome.get("deleted") or 0)
    return 0


def flat_sizes(table: dict[str, dict[str, int]]) -> dict[str, int]:
    """The figures `fairlane bench suite` tabulates: before the drain; after it and the VACUUM
    that autovacuum would run, finished runs kept (pruning removes them only once the retention
    has passed); and after pruning them and a VACUUM."""
    return {
        "runs_table_bytes_before": table["before"]["table_bytes"],
        "runs_table_bytes_after": table["vacuumed"]["table_bytes"],
        "runs_table_bytes_pruned": table["pruned"]["table_bytes"],
        "runs_index_bytes_before": table["before"]["index_bytes"],
        "runs_index_bytes_after": table["vacuumed"]["index_bytes"],
        "runs_index_bytes_pruned": table["pruned"]["index_bytes"],
    }
