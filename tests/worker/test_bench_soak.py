"""``fairlane bench soak`` in its short mode: a line per window with every figure, then the
verdict line; what a user can still see outlived a retention far shorter than the run. The
figures themselves are not checked (benchmarks are not timed tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.cli import main
from fairlane.tools.bench.soak_figures import PLATEAU_FIGURES, spread, verdict
from tests.helpers.bench import bench_databases

SAMPLE_FIELDS = {
    "sample",
    "elapsed_s",
    "rows",
    "heap_bytes",
    "index_bytes",
    "dead_tuples",
    "autovacuums",
    "autoanalyzes",
    "deleted",
    "prune_ticks",
    "produced",
    "finished",
    "pickup_p50_ms",
    "pickup_p99_ms",
}


def test_soak_prints_a_line_per_window_and_a_verdict(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "soak.jsonl"
    before = bench_databases(db)
    argv = ["bench", "soak", "--dsn", dsn, "--rate", "100", "--minutes", "0.1"]
    argv += ["--sample-s", "2", "--retention-s", "0.5", "--prune-interval-s", "0.5"]
    assert main([*argv, "--out", str(out)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *samples, last = lines
    assert [s["sample"] for s in samples] == [1, 2, 3]
    for s in samples:
        assert set(s) == SAMPLE_FIELDS | {"scenario"}
        assert s["produced"] > 0
        assert s["heap_bytes"] > 0
    # The runs of the first window were due for pruning long before the run ended.
    assert sum(s["deleted"] for s in samples) > 0
    assert last["produced"] == sum(s["produced"] for s in samples)
    assert last["settings"] == {"prune_retention_s": 0.5}
    assert {"plateau", "plateau_spread", "p99_growth", "p99_steady"} <= set(last)
    assert set(last["plateau_spread"]) == set(PLATEAU_FIGURES)
    assert last["idempotency_key_kept"] is True
    assert last["waitpoint_kept"] is True
    assert last["batch_kept"] is True
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines
    assert bench_databases(db) == before


def sample(rows: int, p99: float) -> dict[str, Any]:
    return {"rows": rows, "heap_bytes": rows * 10, "index_bytes": rows, "pickup_p99_ms": p99}


def test_the_verdict_reads_the_last_five_samples() -> None:
    growing = [sample(100 * n, 10.0) for n in range(1, 11)]
    flat = [sample(100, 10.0)] * 4 + [sample(1000, 10.0 * n) for n in range(1, 7)]
    assert verdict(growing, 60, 60)["plateau"] is False
    steady = verdict(flat, 60, 60)
    assert steady["plateau"] is True
    # The baseline is the samples after the first retention window and before the plateau's.
    assert steady["p99_baseline_ms"] == 10.0
    assert steady["p99_recent_ms"] == 40.0
    assert steady["p99_steady"] is False
    assert spread([90, 110]) == pytest.approx(0.1)
