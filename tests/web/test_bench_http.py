"""``fairlane bench http-trigger`` and ``ndjson-ingest``: each starts ``fairlane serve`` on its
own database, runs end to end at a tiny size and prints one well-formed JSON line. The figures
themselves are not checked (benchmarks are not timed tests)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane.tools.bench.ndjson_ingest import item_line
from tests.helpers.bench import assert_rate, bench, bench_databases

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.slow


def test_http_trigger(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench_databases(db)
    result = bench(capsys, "http-trigger", "--dsn", dsn, "--requests", "40", "--warmup", "5")
    assert result["scenario"] == "http-trigger"
    assert (result["requests"], result["warmup"]) == (40, 5)
    assert 0 < result["p50_ms"] <= result["p90_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert result["mean_ms"] > 0
    assert result["requests_per_s"] > 0
    assert result["ok"] is True, "not every request made its run"
    assert bench_databases(db) == before, "the benchmark database was not dropped"


def test_ndjson_ingest(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench_databases(db)
    result = bench(capsys, "ndjson-ingest", "--dsn", dsn, "--items", "3000")
    assert result["scenario"] == "ndjson-ingest"
    assert (result["items"], result["item_bytes"]) == (3000, 1024)
    assert_rate(result, 3000, "items_per_s", "seconds")
    assert result["mib_per_s"] == pytest.approx(result["items_per_s"] / 1024, rel=0.02)
    start, peak, end = result["rss_start_mib"], result["rss_peak_mib"], result["rss_end_mib"]
    assert 10 < start <= peak < 4096, (start, peak)
    assert end <= peak, (end, peak)
    tenths = result["rss_mib_by_tenth"]
    assert len(tenths) == 10
    assert all(0 < mib <= peak for mib in tenths)
    assert result["sealed"] is True
    assert result["ok"] is True, "the batch did not receive every item"
    assert bench_databases(db) == before, "the benchmark database was not dropped"


@pytest.mark.parametrize("index", [0, 7, 12345, 999_999])
def test_items_are_the_size_asked_for(index: int) -> None:
    line = item_line(index, 1024)
    assert len(line) == 1024
    assert line.endswith(b"}}\n")
    assert b'"index":%d,' % index in line
