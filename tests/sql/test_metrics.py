"""The Prometheus series: the database side counts what is there per queue and job (the plans
at 1M runs are tests/sql/test_metrics_plan.py), and the repairs the periodic jobs report are
counted by kind. A worker's own series, scraped from its endpoint, are
tests/worker/test_metrics.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, maintenance, trigger, trigger_many
from fairlane.cli import main
from fairlane.engine import engine
from fairlane.engine.statement import first
from fairlane.maintenance.jobs import JOBS, REPAIR_KINDS, repairs_in
from fairlane.metrics import DatabaseCollector, WorkerMetrics
from fairlane.worker.stats import WorkerStats
from tests.helpers import claim, executing_run, statuses, wait_on_runs
from tests.helpers.batch_steps import create_batch, ingest
from tests.helpers.faults import closed_port
from tests.helpers.metrics import labelled, samples, scrape


def test_database_series_report_each_queue_and_job(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = trigger_many(
        db, [TriggerRequest("t", i, environment="acme", queue="mail") for i in range(4)]
    )
    trigger_many(db, [TriggerRequest("t", environment="acme", queue="mail", delay="1h")])
    trigger_many(db, [TriggerRequest("t", environment="other")])
    limits.set_queue(db, "acme", "idle", concurrency_limit=3)
    claim(db, ids[0])
    db.execute(
        "UPDATE fairlane.runs SET queued_at = now() - interval '90 seconds' WHERE id = %s",
        (ids[1],),
    )
    db.execute(
        "INSERT INTO fairlane.periodic_jobs (name, function, interval_s) "
        "VALUES ('broken', 'no_such_function', 3600)"
    )
    maintenance.run_now(db, "promote_delayed_runs")
    maintenance.run_now(db, "broken")
    assert main(["metrics", "--dsn", dsn]) == 0
    found = samples(capsys.readouterr().out)

    def runs(environment: str, queue: str, status: str) -> float:
        return labelled(found, "fairlane_runs", environment=environment, queue=queue, status=status)

    assert labelled(found, "fairlane_database_up") == 1
    assert (runs("acme", "mail", "QUEUED"), runs("acme", "mail", "EXECUTING")) == (3, 1)
    assert runs("acme", "mail", "DELAYED") == 1
    assert (runs("other", "default", "QUEUED"), runs("acme", "idle", "QUEUED")) == (1, 0)
    oldest = labelled(
        found, "fairlane_queue_oldest_queued_seconds", environment="acme", queue="mail"
    )
    assert 90 <= oldest < 3600
    assert (
        labelled(found, "fairlane_queue_oldest_queued_seconds", environment="acme", queue="idle")
        == 0
    )
    job = {"job": "promote_delayed_runs"}
    assert labelled(found, "fairlane_periodic_job_runs_total", **job) == 1
    assert labelled(found, "fairlane_periodic_job_failing", **job) == 0
    assert labelled(found, "fairlane_periodic_job_last_duration_seconds", **job) >= 0
    assert labelled(found, "fairlane_periodic_job_failing", job="broken") == 1
    assert labelled(found, "fairlane_periodic_job_runs_total", job="reclaim_expired_leases") == 0


def test_an_unreachable_database_is_reported_not_raised() -> None:
    found = scrape(DatabaseCollector(f"postgresql://127.0.0.1:{closed_port()}/none"))
    assert found == {("fairlane_database_up", ()): 0}


def test_the_repairs_the_jobs_report_are_counted_by_kind(db: psycopg.Connection[Any]) -> None:
    # Two leases that lapsed (one on its run's last attempt: CRASHED) ...
    lapsed = [executing_run(db, "lapsed")[0], executing_run(db, "last")[0]]
    db.execute("UPDATE fairlane.runs SET max_attempts = 1 WHERE id = %s", (lapsed[1],))
    db.execute(
        "UPDATE fairlane.runs SET lease_until = now() - interval '1 second' WHERE id = ANY(%s)",
        (lapsed,),
    )
    # ... a run EXECUTING with no lease at all ...
    leaseless = trigger(db, "t", environment="leaseless")
    db.execute(
        "UPDATE fairlane.runs SET status = 'EXECUTING', attempts = 1, lease_token = NULL, "
        "lease_until = NULL WHERE id = %s",
        (leaseless,),
    )
    # ... an environment marked drained that has queued runs ...
    trigger(db, "t", environment="marked")
    db.execute("UPDATE fairlane.environments SET drained = (name = 'marked')")
    # ... a waiting run whose wake-up was missed ...
    parent, lease = executing_run(db, "parent")
    child, _ = executing_run(db, "child")
    assert wait_on_runs(db, parent, lease, [child]) == "WAITING"
    db.execute(
        "UPDATE fairlane.waitpoints SET status = 'COMPLETED', completed_at = now() "
        "WHERE run_id = %s",
        (child,),
    )
    # ... and a batch item whose carrier crashed before it made the item's run.
    batch = create_batch(db, "env", 1)
    ingest(db, batch, [0])
    db.execute(
        "UPDATE fairlane.runs SET status = 'CRASHED', finished_at = now() "
        "WHERE task = 'fairlane.batch_item'"
    )
    db.execute("UPDATE fairlane.periodic_jobs SET next_due_at = now()")

    ran = first(db, engine("fairlane").maintenance.run_due())
    assert ran is not None
    assert set(ran.results) == set(ran.seconds) == {job.name for job in JOBS}
    assert all(seconds >= 0 for seconds in ran.seconds.values())
    metrics = WorkerMetrics(WorkerStats(), "w")
    metrics.periodic_jobs_ran(ran)
    found = scrape(metrics.registry)
    repaired = {kind: labelled(found, "fairlane_repairs_total", kind=kind) for kind in REPAIR_KINDS}
    assert repaired == {
        "expired_lease": 2,
        "executing_without_lease": 1,
        "environment_marked_drained": 1,
        "missed_wakeup": 1,
        "orphaned_batch_item": 1,
    }
    assert statuses(db)["CRASHED"] == 2  # the lapsed last attempt and the carrier
    for job in JOBS:
        count = labelled(found, "fairlane_periodic_job_duration_seconds_count", job=job.name)
        total = labelled(found, "fairlane_periodic_job_duration_seconds_sum", job=job.name)
        assert count == 1
        assert total == pytest.approx(ran.seconds[job.name])
    # Nothing is left to repair: the next tick counts nothing more.
    db.execute("UPDATE fairlane.periodic_jobs SET next_due_at = now()")
    again = first(db, engine("fairlane").maintenance.run_due())
    assert again is not None
    assert repairs_in(again.results) == {}
    # A job that failed reports no repairs.
    assert repairs_in({"sweep_concurrency": {"error": "boom"}}) == {}


def test_worker_series_follow_its_stats_without_a_worker_label() -> None:
    stats = WorkerStats(claims=4, claimed=30, lost_leases=1, stale_writes=2, heartbeats=7)
    metrics = WorkerMetrics(stats, "w1")
    found = scrape(metrics.registry)
    assert labelled(found, "fairlane_worker_info", worker_id="w1") == 1
    assert labelled(found, "fairlane_claims_total") == 4
    assert labelled(found, "fairlane_claimed_runs_total") == 30
    assert labelled(found, "fairlane_lease_lost_total") == 1
    assert labelled(found, "fairlane_stale_writes_total") == 2
    assert labelled(found, "fairlane_heartbeats_total") == 7
    # Known label values are there from the start, at zero.
    for kind in REPAIR_KINDS:
        assert labelled(found, "fairlane_repairs_total", kind=kind) == 0
    for state in ("TRIGGERED", "FAILED", "SKIPPED"):
        assert labelled(found, "fairlane_batch_items_total", state=state) == 0
    stats.claims += 5
    metrics.run_finished("t", "COMPLETED", 0.2)
    metrics.run_finished("t", "COMPLETED", 2.0)
    found = scrape(metrics.registry)
    assert labelled(found, "fairlane_claims_total") == 9
    done = {"task": "t", "status": "COMPLETED"}
    assert labelled(found, "fairlane_runs_finished_total", **done) == 2
    assert labelled(found, "fairlane_run_duration_seconds_count", **done) == 2
    assert labelled(found, "fairlane_run_duration_seconds_bucket", **done, le="0.25") == 1
    assert labelled(found, "fairlane_run_duration_seconds_bucket", **done, le="2.5") == 2
    assert labelled(found, "fairlane_run_duration_seconds_sum", **done) == pytest.approx(2.2)
