"""The command's parser tree: shared connection options at any level, refused flag pairs,
defaults in help, --version, and JSON log lines with structured fields."""

from __future__ import annotations

import json
import logging

import pytest

from fairlane.cli import build_parser, main
from fairlane.cli.logs import JsonFormatter

DSN = "postgresql://example.invalid/x"


@pytest.mark.parametrize(
    "argv",
    [
        ["--dsn", DSN, "limits", "env", "acme"],
        ["limits", "--dsn", DSN, "env", "acme"],
        ["limits", "env", "acme", "--dsn", DSN],
        ["--dsn", DSN, "runs", "show", "1"],
        ["--dsn", DSN, "batch", "show", "1"],
        ["--dsn", DSN, "maintenance"],
    ],
)
def test_the_dsn_given_at_any_level_is_kept(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).dsn == DSN


@pytest.mark.parametrize(
    "argv",
    [
        ["limits", "queue", "e", "q", "--pause", "--resume"],
        ["limits", "env", "e", "--pause", "--resume"],
        ["maintenance", "--job", "x", "--enable", "--disable"],
    ],
)
def test_opposite_flags_are_refused_together(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_flags_of_a_pair_set_one_value() -> None:
    parse = build_parser().parse_args
    assert parse(["limits", "env", "e", "--pause"]).paused is True
    assert parse(["limits", "env", "e", "--resume"]).paused is False
    assert parse(["limits", "env", "e"]).paused is None


def test_help_shows_every_default_and_version_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: 10)", "(default: 30.0)", "(default: 1.0)", "(default: 4)"):
        assert shown in text
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("fairlane ")


def test_batch_ingest_takes_environment_like_every_command() -> None:
    args = build_parser().parse_args(["batch", "ingest", "f.ndjson", "--environment", "acme"])
    assert args.env == "acme"


def test_a_json_log_line_carries_the_structured_fields() -> None:
    record = logging.makeLogRecord(
        {
            "name": "fairlane.worker",
            "levelname": "INFO",
            "msg": "run %s completed",
            "args": (7,),
            "run_id": 7,
            "task": "send",
            "duration_ms": 12.5,
        }
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "run 7 completed"
    assert (line["run_id"], line["task"], line["duration_ms"]) == (7, "send", 12.5)
    assert line["level"] == "info"


@pytest.mark.parametrize(("given", "threshold"), [([], 5), (["none"], None), (["0"], 0)])
def test_worker_prepare_threshold(given: list[str], threshold: int | None) -> None:
    flag = ["--prepare-threshold", *given] if given else []
    args = build_parser().parse_args(["worker", "app:tasks", *flag])
    assert args.prepare_threshold == threshold


def test_worker_prepare_threshold_refuses_what_is_not_a_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "app:tasks", "--prepare-threshold", "-1"])
    assert "expected 'none' or an integer >= 0" in capsys.readouterr().err
