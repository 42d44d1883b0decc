"""``fairlane bench suite`` end to end without the peer harness (tiny sizes, a few steps), and
a step that fails or overruns: recorded as an error line, its database dropped."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.cli import main
from fairlane.tools.bench.suite.plan import Step
from fairlane.tools.bench.suite.runner import Launch, run_step
from fairlane.tools.bench.suite.sides import FAIRLANE


def leftovers(db: psycopg.Connection[Any], pids: list[int]) -> list[str]:
    rows = db.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE 'fairlane\\_bench\\_%%' "
        "AND split_part(datname, '_', 4) = ANY(%s)",
        ([str(pid) for pid in pids],),
    ).fetchall()
    return [row[0] for row in rows]


def test_without_the_harness_fairlane_runs_alone_and_the_table_prints(
    dsn: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PEERS_DIR", raising=False)
    out = tmp_path / "results.jsonl"
    argv = [
        "bench",
        "suite",
        "--dsn",
        dsn,
        "--sizes",
        "200",
        "--latency-runs",
        "10",
        "--only",
        "drain/best|enqueue|latency",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| drain 200, best setting (runs/s) | 4000/2000: " in printed
    assert "| bulk enqueue 200, 1,000 per call (runs/s) | " in printed
    assert "| pickup p50 / p99 (ms) | " in printed
    assert "graphile-worker: not installed (PEERS_DIR is not set)" in printed
    lines = [json.loads(text) for text in out.read_text().splitlines()]
    suite, *steps = lines
    assert suite["label"] == "suite"
    assert suite["peers"] == {
        "graphile": "PEERS_DIR is not set",
        "pgqueuer": "PEERS_DIR is not set",
    }
    assert [line["label"] for line in steps] == [
        "fairlane/drain/best@200",
        "fairlane/enqueue@200",
        "fairlane/latency",
    ]
    for line in steps:
        assert line["ok"] is True, line
        assert line["ts"] > suite["ts"]
    assert steps[0]["runs"] == 200
    assert steps[0]["concurrency"] == 4000
    assert steps[2]["runs"] == 10
    assert (tmp_path / "results.stderr.log").read_text().count("== fairlane/") == 3
    assert leftovers(db, [line["pid"] for line in steps]) == []
    # The table of the file is the table printed.
    assert main(["bench", "suite", "--table", str(out)]) == 0
    assert capsys.readouterr().out in printed


def test_a_failed_step_is_an_error_line_and_its_database_is_dropped(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    make_and_fail = (
        "import os, sys, psycopg\n"
        "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "    c.execute(f'CREATE DATABASE fairlane_bench_stuck_{os.getpid()}')\n"
        "print('partial output')\n"
        "sys.exit(3)\n"
    )
    step = Step(FAIRLANE, "drain/best", 10, (), rep=1)
    with (tmp_path / "err.log").open("w") as errors:
        line = run_step(
            step,
            Launch([sys.executable, "-c", make_and_fail, dsn]),
            timeout=60,
            server=dsn,
            errors=errors,
        )
    assert line["label"] == "fairlane/drain/best@10"
    assert line["error"] == "exit 3"
    assert leftovers(db, [line["pid"]]) == []


def test_a_step_past_its_time_cap_is_stopped(dsn: str, tmp_path: Path) -> None:
    step = Step(FAIRLANE, "enqueue", 10, (), rep=1)
    with (tmp_path / "err.log").open("w") as errors:
        line = run_step(
            step,
            Launch([sys.executable, "-c", "import time; time.sleep(120)"]),
            timeout=0.2,
            server=dsn,
            errors=errors,
        )
    assert line["error"] == "stopped after 0.2s"
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(line["pid"], 0)
