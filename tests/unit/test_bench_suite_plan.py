"""The suite's plan (which steps, in which order, labelled as the peer harness labels them),
its sizes and options, and how it finds the peer harness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairlane.cli import build_parser
from fairlane.tools.bench.suite import sitting_from
from fairlane.tools.bench.suite.peers import (
    Harness,
    find_harness,
    missing,
    run_all_default,
    server_variables,
)
from fairlane.tools.bench.suite.plan import Settings, plan
from fairlane.tools.bench.suite.sides import (
    FAIRLANE,
    GRAPHILE,
    PEERS,
    PGQUEUER,
    parse_size,
    size_text,
)

RUN_ALL = """#!/usr/bin/env bash
PY="${PEERS_VENV:-/opt/harness-venv}/bin/python"
NODE_DIR="${PEERS_NODE:-/opt/harness-node}"
"""


def test_one_repetition_runs_each_row_side_by_side_in_harness_labels() -> None:
    steps = plan(Settings((20000, 100000, 1000000)), [FAIRLANE, *PEERS])
    assert [step.label for step in steps] == [
        "fairlane/drain/best",
        "graphile/throughput/tuned",
        "pgqueuer/throughput/batch100",
        "fairlane/drain/c10",
        "graphile/throughput/c10",
        "pgqueuer/throughput/c10",
        "fairlane/drain/tenants1",
        "fairlane/drain/tenants1000",
        "fairlane/drain/tenants10000",
        "fairlane/drain/tenants10000/cap1",
        "fairlane/drain/tenants10000/cap5",
        "fairlane/drain/keys10000",
        "fairlane/drain/tenants1/c10",
        "fairlane/drain/tenants1000/c10",
        "fairlane/drain/tenants10000/c10",
        "fairlane/drain/tenants10000/cap1/c10",
        "fairlane/drain/tenants10000/cap5/c10",
        "fairlane/drain/keys10000/c10",
        "fairlane/enqueue",
        "fairlane/latency",
        "graphile/latency",
        "pgqueuer/latency",
        "fairlane/drain/best@100k",
        "graphile/throughput/tuned@100k",
        "pgqueuer/throughput/batch100@100k",
        # PgQueuer stops at 100k, as the harness does (minutes at 1M)
        "fairlane/drain/best@1M",
        "graphile/throughput/tuned@1M",
    ]
    by_label = {step.label: step.argv for step in steps}
    assert by_label["fairlane/drain/best"] == (
        "drain",
        "--runs",
        "20000",
        "--concurrency",
        "4000",
        "--claim-batch",
        "2000",
    )
    assert by_label["fairlane/drain/tenants10000"][-2:] == ("--tenants", "10000")
    assert by_label["fairlane/drain/tenants10000/cap5/c10"] == (
        "drain",
        "--runs",
        "20000",
        "--concurrency",
        "10",
        "--tenants",
        "10000",
        "--env-cap",
        "5",
    )
    assert by_label["fairlane/drain/tenants10000/c10"] == (
        "drain",
        "--runs",
        "20000",
        "--concurrency",
        "10",
        "--tenants",
        "10000",
    )
    assert by_label["fairlane/drain/c10"] == ("drain", "--runs", "20000", "--concurrency", "10")
    assert by_label["graphile/throughput/tuned@1M"] == (
        "throughput",
        "--config",
        "tuned",
        "-n",
        "1000000",
    )
    assert by_label["pgqueuer/throughput/c10"] == ("throughput", "--config", "c10", "-n", "20000")
    assert by_label["graphile/latency"] == ("latency", "--latency-jobs", "300")
    assert by_label["fairlane/enqueue"] == ("enqueue", "--runs", "20000")
    # Only the largest drain measures the runs table around it.
    assert by_label["fairlane/drain/best@1M"][-1] == "--sizes"
    assert "--sizes" not in by_label["fairlane/drain/best@100k"]


def test_every_other_repetition_reverses_the_side_order() -> None:
    steps = plan(Settings((20000,), reps=2), [FAIRLANE, GRAPHILE, PGQUEUER])
    second = [step.label for step in steps if step.rep == 2]
    assert second[:3] == [
        "pgqueuer/throughput/batch100",
        "graphile/throughput/tuned",
        "fairlane/drain/best",
    ]
    assert len(steps) == 2 * len(second)


def test_without_peers_only_fairlane_runs() -> None:
    steps = plan(Settings((500, 1000), latency_runs=20), [FAIRLANE])
    assert {step.side for step in steps} == {FAIRLANE}
    assert [step.label for step in steps][-1] == "fairlane/drain/best@1k"
    assert next(step.argv for step in steps if step.case == "latency") == (
        "latency",
        "--runs",
        "20",
    )


@pytest.mark.parametrize(
    ("text", "size"), [("20000", 20000), ("20k", 20000), ("1M", 10**6), ("2_500", 2500)]
)
def test_sizes_are_read_and_written_short(text: str, size: int) -> None:
    assert parse_size(text) == size
    assert parse_size(size_text(size)) == size


@pytest.mark.parametrize("text", ["", "k", "-5", "0", "1.5k", "ten"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_options_give_the_sitting() -> None:
    argv = [
        "bench",
        "suite",
        "--sizes",
        "1M,20k,100k",
        "--quick",
        "--best",
        "200/100",
        "--out",
        "x.jsonl",
    ]
    args = build_parser().parse_args(argv)
    sitting = sitting_from(args, {})
    assert sitting.settings.sizes == (20000,)
    assert (sitting.settings.concurrency, sitting.settings.claim_batch) == (200, 100)
    assert sitting.out == Path("x.jsonl")
    assert sitting.named_server is None
    assert "--dsn" not in sitting.fairlane_flags
    named = sitting_from(build_parser().parse_args(["--dsn", "postgresql://h/db", *argv]), {})
    assert named.named_server == "postgresql://h/db"
    assert named.fairlane_flags[:2] == ("--dsn", "postgresql://h/db")
    default = sitting_from(build_parser().parse_args(["bench", "suite"]), {})
    assert default.settings.sizes == (20000, 100000, 1000000)
    assert default.out.parent == Path("bench/results")


@pytest.mark.parametrize(
    "option",
    [["--best", "400"], ["--best", "0/5"], ["--sizes", "1x"], ["--reps", "0"], ["--only", "("]],
)
def test_bad_options_are_usage_errors(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["bench", "suite", *option])
    assert exited.value.code == 2
    assert "suite: error: argument" in capsys.readouterr().err


def test_the_harness_interpreters_default_to_those_of_its_run_all(tmp_path: Path) -> None:
    assert run_all_default(RUN_ALL, "PEERS_VENV") == "/opt/harness-venv"
    assert run_all_default(RUN_ALL, "PEERS_MISSING") is None
    assert find_harness(None, {}) == "PEERS_DIR is not set"
    assert find_harness(None, {"PEERS_DIR": ""}) == "PEERS_DIR is not set"
    assert "no run_all.sh" in str(find_harness(str(tmp_path), {}))
    (tmp_path / "run_all.sh").write_text(RUN_ALL)
    harness = find_harness(None, {"PEERS_DIR": str(tmp_path)})
    assert harness == Harness(
        tmp_path,
        Path("/opt/harness-venv/bin/python"),
        Path("/opt/harness-node/node_modules/.bin/node"),
        Path("/opt/harness-node/node_modules"),
    )
    chosen = find_harness(str(tmp_path), {"PEERS_VENV": "/v", "PEERS_NODE": "/n"})
    assert isinstance(chosen, Harness)
    assert (chosen.python, chosen.node) == (
        Path("/v/bin/python"),
        Path("/n/node_modules/.bin/node"),
    )


def test_a_peer_without_its_script_or_interpreter_is_not_installed(tmp_path: Path) -> None:
    (tmp_path / "run_all.sh").write_text(RUN_ALL)
    harness = find_harness(str(tmp_path), {"PEERS_VENV": str(tmp_path / "venv")})
    assert isinstance(harness, Harness)
    assert missing(harness, PGQUEUER, os.environ) == "no pgqueuer_bench.py in the harness"
    (tmp_path / "pgqueuer_bench.py").write_text("")
    assert "no python at" in str(missing(harness, PGQUEUER, os.environ))


def test_a_named_server_is_given_to_the_peers() -> None:
    assert server_variables("postgresql://bob:s%40cret@db.example:6543/admin") == {
        "PEERS_PG": "postgresql://bob:s%40cret@db.example:6543",
        "PEERS_ADMIN_DB": "admin",
    }
    assert server_variables("host=10.0.0.5 user=ann dbname=postgres") == {
        "PEERS_PG": "postgresql://ann@10.0.0.5",
        "PEERS_ADMIN_DB": "postgres",
    }
