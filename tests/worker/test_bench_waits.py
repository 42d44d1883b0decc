"""``fairlane bench waits``: runs wait on tokens without a worker, resume when the tokens
complete, and a run with steps is replayed once per token; one JSON line out, the database
dropped. Tiny sizes; figures are not checked against the targets."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers.bench import assert_rate, bench, bench_databases


def test_waits(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    argv = ["waits", "--dsn", dsn, "--runs", "300", "--concurrency", "50"]
    result = bench(capsys, *argv, "--steps", "6", "--replays", "3")
    assert (result["scenario"], result["runs"], result["concurrency"]) == ("waits", 300, 50)
    # Nothing pins a waiting run: no lease, nothing held by the worker.
    assert (result["leases_held"], result["runs_held"]) == (0, 0)
    assert result["idle_rss_mb"] > 0
    assert result["rss_growth_mb"] == pytest.approx(
        result["waiting_rss_mb"] - result["idle_rss_mb"], abs=0.11
    )
    assert_rate(result, 300, "resume_runs_per_s", "resume_s")
    # Six steps, each run once though the run was replayed three times (one per token).
    assert (result["step_calls"], result["steps_ran_once"]) == (6, True)
    assert result["steps_replayed"] == 6 * 3
    assert result["worker_replays"] == 300 + 3
    assert result["ok"] is True
    assert bench_databases(db) == before, "the benchmark database was not dropped"
