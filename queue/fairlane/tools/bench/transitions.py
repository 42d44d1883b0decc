"""transitions: what one run's state changes write, measured on a fresh database.

Each transition is the statement a worker or client sends, for ``--runs`` runs at once, run
under ``EXPLAIN (ANALYZE, WAL, BUFFERS)`` inside its own transaction: its WAL records, bytes and
full-page images, the buffers it touched and its execution time, each divided by the runs it
changed. Index entries come from pageinspect: the heap pointers in the leaf pages of each index
on the runs table, before and after (an UPDATE that is not HOT adds an entry to every index
whose predicate the new row version satisfies; old entries stay until vacuum, or until a page
about to split deletes the dead versions bottom-up).

Transitions: trigger (insert QUEUED), claim (QUEUED → EXECUTING), heartbeat (the lease
extended: a HOT update where the run's page has room), complete (EXECUTING → COMPLETED); then,
on a second set of runs, fail with a retry (EXECUTING → DELAYED). Needs the pageinspect
extension (PostgreSQL's contrib; superuser), created in the benchmark's database.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, LiteralString
from uuid import UUID

import psycopg

from fairlane.engine import engine, rows
from fairlane.engine.statement import Statement
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, server_url
from fairlane.tools.bench.enqueue import TASK
from fairlane.triggering.api import trigger_statement
from fairlane.triggering.request import TriggerRequest

# Heap pointers in the leaf pages of each index on runs: a deduplicated posting list counts
# every row version it points to; a page's high key (its first item, unless it is the
# rightmost page) is no entry.
INDEX_ENTRIES_SQL = """
SELECT c.relname,
       coalesce((SELECT sum(coalesce(cardinality(item.tids), 1))
                 FROM generate_series(1, pg_relation_size(c.oid) / 8192 - 1) AS page(n)
                 CROSS JOIN LATERAL bt_page_stats(c.oid::regclass::text, page.n::integer) AS stats
                 CROSS JOIN LATERAL bt_page_items(c.oid::regclass::text, page.n::integer) AS item
                 WHERE stats.type = 'l'
                   AND NOT (stats.btpo_next <> 0 AND item.itemoffset = 1)), 0)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = 'fairlane.runs'::regclass
ORDER BY c.relname
"""

EXPLAIN: LiteralString = "EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) "
# HOT updates of runs this session has not yet reported to the statistics (so read before and
# after a statement in one transaction: the difference is the statement's).
HOT_UPDATES_SQL = "SELECT pg_stat_get_xact_tuples_hot_updated('fairlane.runs'::regclass)"


def index_entries(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {str(name): int(count) for name, count in conn.execute(INDEX_ENTRIES_SQL).fetchall()}


def _hot_updates(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(HOT_UPDATES_SQL).fetchone()
    return int(row[0]) if row else 0


def measure(
    conn: psycopg.Connection[Any], name: str, statement: Statement[Any], runs: int
) -> dict[str, Any]:
    """Run ``statement`` under EXPLAIN ANALYZE (it commits) and report its writes per run."""
    before = index_entries(conn)
    started = time.perf_counter()
    with conn.transaction():
        hot_before = _hot_updates(conn)
        (row,) = conn.execute(EXPLAIN + statement.sql, statement.params).fetchall()
        hot = _hot_updates(conn) - hot_before
    seconds = time.perf_counter() - started
    plan = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
    top = plan["Plan"]
    after = index_entries(conn)
    added = {index: after[index] - before.get(index, 0) for index in after}
    return {
        "transition": name,
        "runs": runs,
        "execution_us_per_run": round(plan["Execution Time"] * 1000 / runs, 2),
        "round_trip_us_per_run": round(seconds * 1e6 / runs, 2),
        "wal_records_per_run": round(top.get("WAL Records", 0) / runs, 2),
        "wal_bytes_per_run": round(top.get("WAL Bytes", 0) / runs, 1),
        "wal_fpi_per_run": round(top.get("WAL FPI", 0) / runs, 3),
        "hot_updates_per_run": round(hot / runs, 2),
        "buffers_per_run": round(
            (top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)) / runs, 2
        ),
        "index_entries_per_run": {
            index: round(count / runs, 2) for index, count in added.items() if count
        },
    }


def _claimed(conn: psycopg.Connection[Any], runs: int) -> tuple[list[int], list[UUID]]:
    """The ids and lease tokens a claim took (read back: EXPLAIN returns the plan, not the
    rows)."""
    found = conn.execute(
        "SELECT id, lease_token FROM fairlane.runs WHERE status = 'EXECUTING' ORDER BY id"
    ).fetchall()
    if len(found) != runs:
        raise RuntimeError(f"expected {runs} claimed runs, found {len(found)}")
    return [int(run_id) for run_id, _ in found], [token for _, token in found]


def transitions(dsn: str, runs: int) -> list[dict[str, Any]]:
    sections = engine(SCHEMA)
    claim = sections.claim.runs(
        runs, lease_s=30.0, worker_id="bench", environments=None, queues=None, full_scan=True
    )
    figures: list[dict[str, Any]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        conn.execute("VACUUM ANALYZE fairlane.runs")
        requests = [TriggerRequest(TASK) for _ in range(runs)]
        figures.append(measure(conn, "trigger", trigger_statement(requests, schema=SCHEMA), runs))
        figures.append(measure(conn, "claim", claim, runs))
        ids, tokens = _claimed(conn, runs)
        heartbeat = sections.leases.heartbeat(ids, tokens, 30.0)
        figures.append(measure(conn, "heartbeat", heartbeat, runs))
        complete = sections.leases.complete(ids, tokens, ["null"] * runs)
        figures.append(measure(conn, "complete", complete, runs))
        rows(conn, trigger_statement(requests, schema=SCHEMA))
        rows(conn, claim)
        ids, tokens = _claimed(conn, runs)
        error = json.dumps({"type": "Exception", "message": "bench"})
        retry = sections.leases.fail(ids, tokens, [error] * runs, ["DELAYED"] * runs, [1.0] * runs)
        figures.append(measure(conn, "fail_retry", retry, runs))
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "transitions", keep=args.keep_db) as dsn:
        figures = transitions(dsn, args.runs)
    return {"scenario": "transitions", "runs": args.runs, "transitions": figures, "ok": True}


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "transitions",
        parents=[common],
        help="WAL, buffers and index entries each state change writes, per run",
    )
    p.add_argument("--runs", type=int, default=1000, help="runs per transition")
    p.set_defaults(func=main)
