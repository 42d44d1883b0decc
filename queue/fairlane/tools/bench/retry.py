"""retry: N runs that ended FAILED, retried by ``Client.retry_many`` with a status filter (the
bulk path of ``fairlane runs retry --status FAILED``). ``runs_per_s`` is N over the wall time of
that one call, which pages through the runs 1,000 per statement."""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from fairlane import Client, RunFilter
from fairlane.tools.bench.common import SCHEMA, count_statuses, emit, fresh_database, server_url

# Failed runs made by one statement: what a failed attempt leaves, without running a worker.
MAKE_FAILED_SQL = f"""
INSERT INTO {SCHEMA}.runs (task, environment, queue, status, payload, attempts, max_attempts,
                           finished_at, error)
SELECT 'bench.fails', 'bench', 'default', 'FAILED', 'null', 3, 3, now(),
       '{{"message": "boom"}}'
FROM generate_series(1, %s)
"""


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "retry", keep=args.keep_db) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {SCHEMA}.queues (environment, name) VALUES "
                "('bench', 'default') ON CONFLICT DO NOTHING"
            )
            conn.execute(MAKE_FAILED_SQL, (args.runs,))
            conn.execute(f"ANALYZE {SCHEMA}.runs")
        with Client(dsn, schema=SCHEMA) as client:
            client.count_by_status()  # connected and checked before the clock starts
            started = time.perf_counter()
            result = client.retry_many(RunFilter(status="FAILED", environment="bench"))
            seconds = time.perf_counter() - started
        with psycopg.connect(dsn, autocommit=True) as conn:
            queued = count_statuses(conn).get("QUEUED", 0)
    return {
        "scenario": "retry",
        "runs": args.runs,
        "retried": result.changed,
        "runs_per_s": round(args.runs / seconds),
        "seconds": round(seconds, 3),
        "ok": queued == args.runs == result.changed,
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "retry", parents=[common], help="bulk retry of failed runs by filter (retry_many)"
    )
    p.add_argument("--runs", type=int, default=10000)
    p.set_defaults(func=main)
