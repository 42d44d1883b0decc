"""``fairlane bench batch``: ingest an NDJSON batch, drain it, one JSON line out."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from fairlane.cli import main
from tests.helpers.bench import assert_rate


def test_bench_batch(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "batch", "--dsn", dsn, "--items", "300", "--concurrency", "8"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["scenario"] == "batch"
    assert result["items"] == 300
    assert result["ok"] is True
    assert result["status"] == "COMPLETED"
    assert_rate(result, 300, "ingest_items_per_s", "ingest_s")
    assert_rate(result, 300, "runs_per_s", "drain_s")
