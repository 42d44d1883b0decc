"""``fairlane bench promote``: delayed runs fall due at once and the periodic job promotes
them; one JSON line out, the database dropped. Tiny sizes; figures are not checked."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers.bench import assert_rate, bench, bench_databases


def test_promote(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    argv = ["promote", "--dsn", dsn, "--runs", "500", "--batch-size", "100", "--max-batches", "2"]
    result = bench(capsys, *argv)
    assert result["scenario"] == "promote"
    assert result["runs"] == 500
    assert (result["batch_size"], result["max_batches"]) == (100, 2)
    assert sum(result["promoted_per_tick"]) == 500
    assert all(promoted <= 200 for promoted in result["promoted_per_tick"])
    assert result["ticks"] == len(result["promoted_per_tick"]) >= 3
    assert_rate(result, 500, "runs_per_s", "seconds")
    assert result["ok"] is True, "not every run was QUEUED"
    assert bench_databases(db) == before, "the benchmark database was not dropped"
