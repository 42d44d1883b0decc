"""The Prometheus series: the database side counts what is there per queue and job, a worker's
counters follow its stats, and the database statements read no finished history (no
sequential scan of runs, as tests/sql/test_claim_plan.py checks the claim)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairlane import TriggerRequest, maintenance, trigger_many
from fairlane.cli import main
from fairlane.engine import engine
from fairlane.metrics import DatabaseCollector, WorkerCollector
from fairlane.worker.stats import WorkerStats


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_database_series_count_each_queue(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    trigger_many(db, [TriggerRequest("t", i, environment="acme", queue="mail") for i in range(3)])
    trigger_many(db, [TriggerRequest("t", environment="acme", queue="mail", delay="1h")])
    db.commit()
    maintenance.run_now(db, "promote_delayed_runs")
    assert main(["metrics", "--dsn", dsn]) == 0
    found = samples(capsys.readouterr().out)
    labels = (("environment", "acme"), ("queue", "mail"))
    assert found[("fairlane_runs", (*labels, ("status", "QUEUED")))] == 3
    assert found[("fairlane_runs", (*labels, ("status", "DELAYED")))] == 1
    assert found[("fairlane_runs", (*labels, ("status", "EXECUTING")))] == 0
    assert found[("fairlane_queue_oldest_queued_seconds", labels)] >= 0
    assert found[("fairlane_periodic_job_runs_total", (("job", "promote_delayed_runs"),))] == 1


def test_worker_counters_follow_its_stats() -> None:
    stats = WorkerStats(claims=4, claimed=30, completed=25, failed=2, lost_leases=1)
    registry = CollectorRegistry()
    registry.register(WorkerCollector(stats, "w1"))
    found = samples(generate_latest(registry).decode())
    worker = (("worker", "w1"),)
    assert found[("fairlane_claims_total", worker)] == 4
    assert found[("fairlane_lease_lost_total", worker)] == 1
    assert (
        found[("fairlane_runs_finished_total", (("status", "COMPLETED"), ("worker", "w1")))] == 25
    )
    stats.completed += 5
    found = samples(generate_latest(registry).decode())
    assert (
        found[("fairlane_runs_finished_total", (("status", "COMPLETED"), ("worker", "w1")))] == 30
    )


def test_the_series_statements_read_no_finished_history(db: psycopg.Connection[Any]) -> None:
    # 20,000 finished runs and a few live ones, statistics fresh: a plan that scanned the runs
    # table would show here.
    db.execute(
        "INSERT INTO fairlane.runs (task, environment, queue, status, finished_at, payload) "
        "SELECT 't', 'e' || (n % 20), 'default', 'COMPLETED', now(), 'null' "
        "FROM generate_series(1, 20000) n"
    )
    trigger_many(db, [TriggerRequest("t", i, environment="e1") for i in range(5)])
    db.execute("ANALYZE fairlane.runs")
    metrics = engine("fairlane").metrics
    for statement in (metrics.queues(), metrics.periodic_jobs()):
        plan = "\n".join(row[0] for row in db.execute(f"EXPLAIN {statement.sql}").fetchall())
        assert "Seq Scan on runs" not in plan, plan
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(db.info.dsn))
    db.commit()
    assert "fairlane_runs" in generate_latest(registry).decode()


def test_a_worker_serves_its_counters_and_the_database_series_over_http(dsn: str) -> None:
    import socket
    import urllib.request

    from fairlane.metrics import serve_worker_metrics

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stats = WorkerStats(claims=2)
    serve_worker_metrics(port, stats, "w9", dsn, host="127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        found = samples(response.read().decode())
    assert found[("fairlane_claims_total", (("worker", "w9"),))] == 2
    assert any(name == "fairlane_periodic_job_runs_total" for name, _ in found)
