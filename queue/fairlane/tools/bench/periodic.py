"""periodic: the periodic jobs and the metrics statements over many environments.

``--tenants N`` environments in a deployment's states (tenant_states: most drained, a tenth
active with runs QUEUED and one EXECUTING under a live lease, some DELAYED, finished runs in
each). Then ``--reps`` times: every periodic job made due at once and run by the runner as a
worker runs it (``CALL run_due_periodic_jobs``, one transaction per job), each job's ``took``
kept; and every statement a metrics scrape runs (metrics/database.py: the queue and job series,
the workers registry and its unserved tasks), each timed on the scrape's own connection
settings, then the whole scrape as ``fairlane metrics`` serves it (DatabaseCollector).

The line reports, per job, its interval (its tick) and the median and largest ``took`` over
the repetitions, and ``tick_share``: the largest over the interval (1.0 would be a job that
fills its tick). Per metrics statement the same, against the scrape's statement_timeout.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from fairlane.engine import engine
from fairlane.engine.statement import Statement, rows
from fairlane.metrics.database import SCRAPE_CONNECTION, DatabaseCollector
from fairlane.metrics.registry import UNSERVED_SERIES
from fairlane.tools.bench import tenant_states
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, server_url

log = logging.getLogger("fairlane.tools.bench")

MAKE_DUE_SQL = sql.SQL("UPDATE {}.periodic_jobs SET next_due_at = now()").format(
    sql.Identifier(SCHEMA)
)
RUN_DUE_SQL = sql.SQL("CALL {}.run_due_periodic_jobs(NULL, NULL)").format(sql.Identifier(SCHEMA))
INTERVALS_SQL = sql.SQL("SELECT name, interval_s FROM {}.periodic_jobs WHERE enabled").format(
    sql.Identifier(SCHEMA)
)


def run_jobs(conn: psycopg.Connection[Any], reps: int) -> tuple[dict[str, list[float]], Any]:
    """Each repetition: every job due, one CALL; the seconds each job took, by name, and the
    last repetition's outcomes."""
    took: dict[str, list[float]] = {}
    ran: Any = None
    for _ in range(reps):
        conn.execute(MAKE_DUE_SQL)
        row = conn.execute(RUN_DUE_SQL).fetchone()
        assert row is not None
        ran, seconds = row
        for job, value in seconds.items():
            took.setdefault(job, []).append(float(value))
    return took, ran


def metrics_statements() -> dict[str, Statement[Any]]:
    metrics, workers = engine(SCHEMA).metrics, engine(SCHEMA).workers
    return {
        "queue_series": metrics.queues(),
        "periodic_job_series": metrics.periodic_jobs(),
        "list_workers": workers.list(),
        "unserved_tasks": workers.unserved(UNSERVED_SERIES),
    }


def time_metrics(dsn: str, reps: int) -> dict[str, list[float]]:
    """Each statement of a scrape on the scrape's connection settings; then whole scrapes."""
    took: dict[str, list[float]] = {}
    with psycopg.connect(dsn, **SCRAPE_CONNECTION.kwargs(dsn)) as conn:
        for _ in range(reps):
            for name, statement in metrics_statements().items():
                started = time.perf_counter()
                rows(conn, statement)
                took.setdefault(name, []).append(time.perf_counter() - started)
    collector = DatabaseCollector(dsn, schema=SCHEMA)
    for _ in range(reps):
        started = time.perf_counter()
        list(collector.collect())
        took.setdefault("scrape", []).append(time.perf_counter() - started)
    return took


def figures(took: list[float], tick_s: float) -> dict[str, float]:
    return {
        "tick_s": tick_s,
        "median_ms": round(statistics.median(took) * 1000, 2),
        "max_ms": round(max(took) * 1000, 2),
        "tick_share": round(max(took) / tick_s, 4),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_database(server_url(args.dsn), "periodic", keep=args.keep_db) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            started = time.perf_counter()
            runs = tenant_states.create(conn, args.tenants)
            log.info(
                "%d environments written in %.2fs", args.tenants, time.perf_counter() - started
            )
            intervals = {str(n): float(s) for n, s in conn.execute(INTERVALS_SQL).fetchall()}
            jobs, outcomes = run_jobs(conn, args.reps)
        scrape = time_metrics(dsn, args.reps)
    timeout_s = float(SCRAPE_CONNECTION.statement_timeout or 0)
    job_figures = {job: figures(took, intervals[job]) for job, took in sorted(jobs.items())}
    metric_figures = {name: figures(took, timeout_s) for name, took in scrape.items()}
    every = [*job_figures.values(), *metric_figures.values()]
    return {
        "scenario": "periodic",
        "tenants": args.tenants,
        "reps": args.reps,
        "runs": runs,
        "jobs": job_figures,
        "metrics": metric_figures,
        "last_outcomes": outcomes,
        "max_tick_share": max(f["tick_share"] for f in every),
        "ok": all(f["tick_share"] < 1 for f in every) and len(jobs) == len(intervals),
    }


def main(args: argparse.Namespace) -> int:
    emit(run(args))
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "periodic",
        parents=[common],
        help="the periodic jobs' and the metrics statements' durations over many environments",
    )
    p.add_argument("--tenants", type=int, default=1000, help="environments (default: 1000)")
    p.add_argument("--reps", type=int, default=5, help="times every job runs (default: 5)")
    p.set_defaults(func=main)
