"""Periodic jobs: exactly once per tick across workers, crash-safe, failures recorded, CLI."""

from __future__ import annotations

from contextlib import suppress
from itertools import pairwise
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import TaskRegistry, Worker, maintenance
from fairlane.cli import main
from tests.helpers import running, wait_until

pytestmark = pytest.mark.anyio

PROBE = """
CREATE TABLE public.probe_log (tick timestamptz, run_count bigint, pid integer);
CREATE FUNCTION fairlane.probe() RETURNS jsonb LANGUAGE sql AS $$
    INSERT INTO public.probe_log
    SELECT next_due_at, run_count, pg_backend_pid()
    FROM fairlane.periodic_jobs WHERE name = 'probe';
    SELECT '{"probed": true}'::jsonb;
$$;
UPDATE fairlane.periodic_jobs SET enabled = false;
INSERT INTO fairlane.periodic_jobs (name, function, interval_s, next_due_at)
VALUES ('probe', 'probe', 0.1, now());
"""


def run_count(db: psycopg.Connection[Any], name: str) -> int:
    row = db.execute("SELECT run_count FROM fairlane.periodic_jobs WHERE name = %s", (name,))
    found = row.fetchone()
    assert found is not None
    return int(found[0])


async def test_each_tick_runs_exactly_once_across_three_workers(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(PROBE)
    workers = [
        Worker(TaskRegistry(), dsn, periodic_interval=0.01, poll_interval=5) for _ in range(3)
    ]
    async with running(*workers):
        await wait_until(lambda: run_count(db, "probe") >= 20, within=30, what="20 ticks")
    log = db.execute("SELECT tick, run_count, pid FROM public.probe_log ORDER BY tick").fetchall()
    total = run_count(db, "probe")
    assert len(log) == total >= 20
    # One run per tick: run counts 0..n-1 and tick times all distinct, 0.1 s apart or more.
    assert [count for _, count, _ in log] == list(range(total))
    ticks = [tick for tick, _, _ in log]
    assert len(set(ticks)) == len(ticks)
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(ticks)]
    assert all(gap >= 0.0999 for gap in gaps), gaps
    # The workers really competed for the ticks.
    assert len({pid for _, _, pid in log}) > 1


async def test_a_crashed_job_runs_again(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute(
        "CREATE FUNCTION fairlane.slow_job() RETURNS jsonb LANGUAGE sql AS "
        "$$ SELECT pg_sleep(60); SELECT '{}'::jsonb $$;"
        "UPDATE fairlane.periodic_jobs SET enabled = false;"
        "INSERT INTO fairlane.periodic_jobs (name, function, interval_s) "
        "VALUES ('slow', 'slow_job', 3600)"
    )
    victim = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    pid = victim.info.backend_pid

    async def run_in_victim() -> None:
        # Its backend is terminated below: that is the crash being simulated.
        with suppress(psycopg.OperationalError):
            await victim.execute("CALL fairlane.run_due_periodic_jobs(NULL)")

    async with anyio.create_task_group() as group:
        group.start_soon(run_in_victim)

        def sleeping() -> bool:
            row = db.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            return row is not None and row[0] == "PgSleep"

        await wait_until(sleeping, what="the job to be running")
        # While the first run holds the tick, nobody else runs it.
        assert maintenance.run_due(db) == {}
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    await victim.close()
    assert run_count(db, "slow") == 0  # the crashed run left no trace
    db.execute(
        "CREATE OR REPLACE FUNCTION fairlane.slow_job() RETURNS jsonb LANGUAGE sql AS "
        "$$ SELECT '{\"ok\": true}'::jsonb $$"
    )
    assert maintenance.run_due(db) == {"slow": {"ok": True}}
    assert run_count(db, "slow") == 1


def test_a_failing_job_records_its_error_and_keeps_its_schedule(
    db: psycopg.Connection[Any],
) -> None:
    db.execute(
        "CREATE FUNCTION fairlane.broken() RETURNS jsonb LANGUAGE sql AS "
        "$$ SELECT 1 / 0; SELECT '{}'::jsonb $$;"
        "UPDATE fairlane.periodic_jobs SET enabled = false;"
        "INSERT INTO fairlane.periodic_jobs (name, function, interval_s) "
        "VALUES ('broken', 'broken', 60)"
    )
    ran = maintenance.run_due(db)
    assert "division by zero" in ran["broken"]["error"]
    (job,) = [job for job in maintenance.list_jobs(db) if job.name == "broken"]
    assert job.last_error is not None
    assert "division by zero" in job.last_error
    assert job.run_count == 1
    assert job.next_due_at > job.last_started_at  # type: ignore[operator]


def test_cli_lists_configures_and_runs_jobs(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["maintenance", "--dsn", dsn]) == 0
    listed = capsys.readouterr().out
    for job in (
        "reclaim_expired_leases",
        "promote_delayed_runs",
        "expire_ttl_runs",
        "sweep_concurrency",
        "prune_finished_runs",
    ):
        assert job in listed
    assert (
        main(["maintenance", "--dsn", dsn, "--job", "prune_finished_runs", "--interval", "5"]) == 0
    )
    assert "prune_finished_runs" in capsys.readouterr().out
    (pruning,) = [j for j in maintenance.list_jobs(db) if j.name == "prune_finished_runs"]
    assert pruning.interval_s == 5
    assert main(["maintenance", "--dsn", dsn, "--run-now", "sweep_concurrency"]) == 0
    assert '"repaired_runs": 0' in capsys.readouterr().out
    assert main(["settings", "--dsn", dsn, "--set", "prune_retention_s", "3600"]) == 0
    assert "prune_retention_s" in capsys.readouterr().out
    assert {s.name: s.value for s in maintenance.list_settings(db)}["prune_retention_s"] == 3600
