"""soak: what each sample reads from the server, the pickups a sample saw, and the verdict.

A sample is the runs table as the server sees it at the end of a window (``--sample-s``, a
minute by default): its rows, heap and index bytes, and the dead tuples the statistics count
(``n_dead_tup``, which autovacuum resets when it runs: ``autovacuums`` says how many times it
has so far), beside what the window saw: runs produced, handler calls finished, rows deleted,
pruning ticks run, and the pickups' p50 and p99 (trigger call to handler start).

The verdict reads the last ``PLATEAU_SAMPLES`` samples (five minutes at the default window):
the rows, heap and index bytes each stay within ``PLATEAU_TOLERANCE`` of their mean there, and
the median pickup p99 there is compared with the median of the samples before (those after the
first retention window): their ratio is ``p99_growth``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import psycopg

from fairlane.tools.bench.common import SCHEMA, percentile

PLATEAU_SAMPLES = 5
PLATEAU_TOLERANCE = 0.20
PLATEAU_FIGURES = ("rows", "heap_bytes", "index_bytes")

TABLE_SQL = f"""
SELECT (SELECT count(*) FROM {SCHEMA}.runs),
       pg_relation_size('{SCHEMA}.runs'),
       pg_indexes_size('{SCHEMA}.runs'),
       s.n_dead_tup, s.n_tup_del, s.autovacuum_count, s.autoanalyze_count,
       (SELECT j.run_count FROM {SCHEMA}.periodic_jobs j WHERE j.name = 'prune_finished_runs')
FROM pg_stat_user_tables s
WHERE s.schemaname = '{SCHEMA}' AND s.relname = 'runs'
"""


@dataclass
class Window:
    """What the producer and the handlers saw since the last sample."""

    produced: int = 0
    finished: int = 0
    pickups_ms: list[float] = field(default_factory=list)


async def read_table(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """The runs table's figures now; statistics as of the server's last flush of them."""
    # A fresh snapshot of the statistics, not the one this session cached at its first read.
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await (await conn.execute(TABLE_SQL)).fetchone()
    rows, heap, index, dead, deleted, autovacuums, autoanalyzes, ticks = row or (0,) * 8
    return {
        "rows": int(rows),
        "heap_bytes": int(heap),
        "index_bytes": int(index),
        "dead_tuples": int(dead),
        "deleted_total": int(deleted),
        "autovacuums": int(autovacuums),
        "autoanalyzes": int(autoanalyzes),
        "prune_ticks_total": int(ticks),
    }


def sample_line(
    number: int,
    elapsed_s: float,
    table: dict[str, int],
    before: dict[str, int],
    window: Window,
) -> dict[str, Any]:
    """One sample's JSON line; ``before`` is the table's figures at the window's start."""
    pickups = window.pickups_ms
    return {
        "scenario": "soak",
        "sample": number,
        "elapsed_s": round(elapsed_s, 1),
        "rows": table["rows"],
        "heap_bytes": table["heap_bytes"],
        "index_bytes": table["index_bytes"],
        "dead_tuples": table["dead_tuples"],
        "autovacuums": table["autovacuums"],
        "autoanalyzes": table["autoanalyzes"],
        "deleted": table["deleted_total"] - before["deleted_total"],
        "prune_ticks": table["prune_ticks_total"] - before["prune_ticks_total"],
        "produced": window.produced,
        "finished": window.finished,
        "pickup_p50_ms": round(percentile(pickups, 50), 1) if pickups else None,
        "pickup_p99_ms": round(percentile(pickups, 99), 1) if pickups else None,
    }


def spread(values: list[float]) -> float:
    """The largest distance of a value from the values' mean, as a fraction of that mean."""
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0 if not any(values) else float("inf")
    return max(abs(value - mean) for value in values) / mean


def verdict(samples: list[dict[str, Any]], sample_s: float, retention_s: float) -> dict[str, Any]:
    """The plateau and p99 verdict over the samples (see the module docstring)."""
    last = samples[-PLATEAU_SAMPLES:]
    spreads = {name: round(spread([s[name] for s in last]), 3) for name in PLATEAU_FIGURES}
    plateau = len(samples) > PLATEAU_SAMPLES and all(
        value <= PLATEAU_TOLERANCE for value in spreads.values()
    )
    # The samples between the first retention window and the plateau's: the baseline.
    first = int(retention_s // sample_s) + 1
    earlier = samples[first : len(samples) - len(last)] or samples[:1]
    recent_p99 = [s["pickup_p99_ms"] for s in last if s["pickup_p99_ms"] is not None]
    earlier_p99 = [s["pickup_p99_ms"] for s in earlier if s["pickup_p99_ms"] is not None]
    growth = (
        statistics.median(recent_p99) / statistics.median(earlier_p99)
        if recent_p99 and earlier_p99 and statistics.median(earlier_p99) > 0
        else None
    )
    return {
        "plateau_samples": len(last),
        "plateau_spread": spreads,
        "plateau": plateau,
        "p99_baseline_ms": statistics.median(earlier_p99) if earlier_p99 else None,
        "p99_recent_ms": statistics.median(recent_p99) if recent_p99 else None,
        "p99_growth": round(growth, 2) if growth is not None else None,
        "p99_steady": growth is not None and growth <= 1 + PLATEAU_TOLERANCE,
    }
