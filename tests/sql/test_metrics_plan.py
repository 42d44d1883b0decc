"""The database-side series, and the autoscaling query the README gives KEDA, read indexes and
never scan the runs table at 1,000,000 runs (the fill takes 15 to 25 s on a 2-core machine).

The runs are what a busy deployment holds: mostly finished history, a deep backlog in one
tenant's queue, work spread over a hundred more, delayed, executing and waiting runs. Only
ANALYZE runs after the fill (no VACUUM, so no page is marked all-visible yet: the plans an
index-only scan is least attractive to). The statements are plain SQL, so EXPLAIN shows every
subplan.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.engine import engine
from fairlane.metrics import DatabaseCollector
from fairlane.metrics.keys import KEY_SERIES, KEY_SERIES_PER_QUEUE
from tests.helpers.metrics import labelled, scrape

ROOT = Path(__file__).resolve().parents[2]

# Per hundred runs: 60 finished, 20 queued in acme's default queue, 5 queued elsewhere, 5
# delayed, 5 executing and 5 waiting, spread over 100 environments of two queues each.
PLACES = """
INSERT INTO fairlane.environments (name, drained)
SELECT 'env-' || e, false FROM generate_series(0, 99) AS e
UNION ALL SELECT 'acme', false;
INSERT INTO fairlane.queues (environment, name)
SELECT environment, q
FROM (SELECT 'env-' || e AS environment FROM generate_series(0, 99) AS e
      UNION ALL SELECT 'acme') AS envs,
     unnest(ARRAY['default', 'bulk']) AS q;
"""
RUNS = """
INSERT INTO fairlane.runs (environment, queue, task, payload, status, attempts, available_at,
                          started_at, finished_at, lease_token, lease_until, worker_id)
SELECT CASE WHEN kind = 'acme' THEN 'acme' ELSE 'env-' || (i / 100 %% 100) END,
       CASE WHEN kind <> 'acme' AND i %% 2 = 0 THEN 'bulk' ELSE 'default' END,
       't' || (i %% 7), jsonb_build_object('n', i), status,
       CASE WHEN status IN ('QUEUED', 'DELAYED') THEN 0 ELSE 1 END,
       CASE WHEN status = 'DELAYED' THEN now() + interval '1 hour' END,
       CASE WHEN status NOT IN ('QUEUED', 'DELAYED') THEN now() - interval '1 minute' END,
       CASE WHEN status IN ('COMPLETED', 'FAILED')
            THEN now() - make_interval(secs => i %% 86400) END,
       CASE WHEN status IN ('EXECUTING', 'WAITING') THEN gen_random_uuid() END,
       CASE WHEN status IN ('EXECUTING', 'WAITING') THEN now() + interval '1 hour' END,
       CASE WHEN status IN ('EXECUTING', 'WAITING') THEN 'w' || (i %% 10) END
FROM (SELECT i,
             CASE WHEN i %% 100 < 55 THEN 'COMPLETED'
                  WHEN i %% 100 < 60 THEN 'FAILED'
                  WHEN i %% 100 < 85 THEN 'QUEUED'
                  WHEN i %% 100 < 90 THEN 'DELAYED'
                  WHEN i %% 100 < 95 THEN 'EXECUTING'
                  ELSE 'WAITING' END AS status,
             CASE WHEN i %% 100 BETWEEN 60 AND 79 THEN 'acme' ELSE 'spread' END AS kind
      FROM generate_series(1, %(runs)s) AS i) AS fill
"""
ANALYZE = """
ANALYZE fairlane.runs;
ANALYZE fairlane.environments;
ANALYZE fairlane.queues;
ANALYZE fairlane.periodic_jobs;
"""
# Tables the series read whole because they report on every row of them: one row per queue,
# one per periodic job.
SCANNED_WHOLE = {"queues", "periodic_jobs"}


def readme_autoscaling_query() -> str:
    """The query of the README's KEDA trigger (section Metrics)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Metrics") :]
    found = re.search(r'^\s*query: "(.+)"$', section, re.MULTILINE)
    assert found, "the README's Metrics section has no KEDA query"
    return found.group(1)


def statements() -> dict[str, tuple[str, Any]]:
    """Each statement and its parameters."""
    metrics = engine("fairlane").metrics
    keys = metrics.keys(KEY_SERIES_PER_QUEUE, KEY_SERIES)
    return {
        "queue_series": (metrics.queues().sql, None),
        "periodic_job_series": (metrics.periodic_jobs().sql, None),
        "key_series": (keys.sql, keys.params),
        "README autoscaling query": (readme_autoscaling_query(), None),
    }


def nested_plans(db: psycopg.Connection[Any], sql: str) -> list[str]:
    """The plans of ``sql`` and of the statements inside the functions it calls."""
    try:
        db.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain is not available to this role: {error}")
    plans: list[str] = []
    db.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    settings = ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice")
    for setting in settings:
        db.execute(f"SET auto_explain.{setting}")
    db.execute("SET client_min_messages = notice")
    db.execute(sql)
    db.execute("SET auto_explain.log_min_duration = -1")
    nested = [plan for plan in plans if "runs" in plan]
    assert nested, plans
    return nested


def check_plans(db: psycopg.Connection[Any], runs: int) -> None:
    db.execute(PLACES)
    started = time.perf_counter()
    db.execute(RUNS, {"runs": runs})
    db.execute(ANALYZE)
    filled_s = time.perf_counter() - started
    for name, (sql, params) in statements().items():
        plan = "\n".join(row[0] for row in db.execute(f"EXPLAIN {sql}", params).fetchall())
        scanned = set(re.findall(r"Seq Scan on (\w+)", plan))
        assert scanned <= SCANNED_WHOLE, f"{name} scans {scanned - SCANNED_WHOLE}:\n{plan}"
        if "runs" in sql:
            assert re.search(r"Index (Only )?Scan using runs_\w+ on runs|Index Scan on runs_", plan)
    # The README's query calls a function: its own statements' plans, as auto_explain logs them.
    for plan in nested_plans(db, readme_autoscaling_query()):
        assert "Seq Scan on runs" not in plan, plan
    took: dict[str, float] = {}
    # The first reads of the fresh rows set their hint bits: the second scrape is the usual.
    for scrape_n in ("first scrape", "second scrape"):
        started = time.perf_counter()
        found = scrape(DatabaseCollector(db.info.dsn))
        took[scrape_n] = time.perf_counter() - started
    started = time.perf_counter()
    (keda,) = db.execute(readme_autoscaling_query()).fetchone() or (None,)
    took["README autoscaling query"] = time.perf_counter() - started
    # A figure to read (make stress prints it), never a bound: this machine is shared.
    print(
        f"\n{runs:,} runs, filled and analyzed in {filled_s:.1f} s: "
        + ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in took.items())
    )
    # What the series report is the fill, exactly.
    acme_queued = labelled(
        found, "fairlane_runs", environment="acme", queue="default", status="QUEUED"
    )
    assert acme_queued == keda == runs // 100 * 20
    assert labelled(found, "fairlane_database_up") == 1
    totals = {status: 0.0 for status in ("QUEUED", "DELAYED", "EXECUTING")}
    for (name, labels), value in found.items():
        if name == "fairlane_runs":
            totals[dict(labels)["status"]] += value
    assert totals == {"QUEUED": runs // 4, "DELAYED": runs // 20, "EXECUTING": runs // 20}


@pytest.mark.timeout(300)
def test_the_series_read_no_sequential_scan_at_1m_runs(db: psycopg.Connection[Any]) -> None:
    check_plans(db, 1_000_000)
