"""The command's parser tree: shared connection options at any level, refused flag pairs,
defaults in help, --version, and JSON log lines with structured fields."""

from __future__ import annotations

import argparse
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


def _leaf_commands() -> list[list[str]]:
    """Every subcommand of the tree with its required positional arguments filled in, e.g.
    ["runs", "show", "1"]."""
    paths: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and prefix:
            positionals = [
                str(next(iter(a.choices))) if a.choices else "1"
                for a in parser._actions
                if not a.option_strings and a.nargs not in ("?", "*")
            ]
            paths.append([*prefix, *positionals])
        for action in subs:
            for name, sub in dict(action.choices).items():
                walk(sub, [*prefix, name])

    walk(build_parser(), [])
    return paths


@pytest.mark.parametrize("path", _leaf_commands(), ids=" ".join)
def test_global_options_are_accepted_after_every_subcommand(path: list[str]) -> None:
    """--log-level, --log-format, --json and -v mean the same after a subcommand's name and
    arguments as before them."""
    args = build_parser().parse_args(
        [*path, "--log-level", "debug", "--log-format", "json", "--json", "-v"]
    )
    assert (args.log_level, args.log_format, args.json, args.verbose) == (
        "debug",
        "json",
        True,
        True,
    )


def test_global_options_before_the_subcommand_are_not_overwritten() -> None:
    args = build_parser().parse_args(["--json", "--log-level", "warning", "status"])
    assert (args.json, args.log_level) == (True, "warning")
    args = build_parser().parse_args(["runs", "show", "7", "--json"])
    assert args.json is True
    assert args.run_id == 7


def test_help_has_no_docstring_markup(capsys: pytest.CaptureFixture[str]) -> None:
    for path in [[], ["demo"], ["worker"], ["runs", "list"]]:
        with pytest.raises(SystemExit):
            main([*path, "--help"])
        assert "``" not in capsys.readouterr().out


def test_log_lines_go_to_stderr_as_it_is_when_they_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread still logging after the stream logging was configured with closed (a test's
    captured stderr) writes to the current stderr instead of failing on the closed one."""
    import io

    from fairlane.cli import logs

    root = logging.getLogger()
    kept = root.handlers[:], root.level
    try:
        first = io.StringIO()
        monkeypatch.setattr("sys.stderr", first)
        logs.configure("info", "text")
        first.close()
        second = io.StringIO()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("fairlane.test").info("still heard")
        assert "still heard" in second.getvalue()
    finally:
        root.handlers[:], level = kept
        root.setLevel(level)
