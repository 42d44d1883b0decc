"""The documented exit codes, each with one line on stderr and no traceback: 1 operational
(the server refuses connections), 2 usage (a value out of range), 3 not found, 4 schema not
migrated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg import sql

from fairlane.cli import main


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_exit_codes(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    refused = "postgresql://127.0.0.1:1/nothing?connect_timeout=2"
    assert main(["runs", "show", "1", "--dsn", refused]) == 1
    assert "connection" in _one_line(capsys)

    assert main(["settings", "--set", "prune_batch_size", "0", "--dsn", dsn]) == 2
    assert "prune_batch_size" in _one_line(capsys)

    # A task spec naming no registry: refused before the worker connects.
    assert main(["worker", "tests.faults.tasks:no_such_registry", "--dsn", dsn]) == 2
    assert "not a fairlane TaskRegistry" in _one_line(capsys)

    assert main(["runs", "show", "424242", "--dsn", dsn]) == 3
    assert "424242" in _one_line(capsys)

    db.autocommit = True
    empty = f"{db.info.dbname}_empty"
    db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(empty)))
    try:
        other = psycopg.conninfo.make_conninfo(dsn, dbname=empty)
        assert main(["status", "--dsn", other]) == 4
        assert "fairlane migrate" in _one_line(capsys)
    finally:
        db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(empty)))


def test_read_commands_print_json(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from fairlane import TriggerRequest, trigger_many

    trigger_many(db, [TriggerRequest("t", environment="acme", queue="mail")])
    db.commit()
    assert main(["status", "--json", "--dsn", dsn]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["QUEUED"] == 1
    assert [(t["environment"], t["task"]) for t in status["unserved_tasks"]] == [("acme", "t")]
    assert main(["--json", "limits", "queue", "acme", "mail", "--pause", "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    (queue,) = [row for row in shown["queues"] if row["queue"] == "mail"]
    assert (queue["queued"], queue["queue_paused"]) == (1, True)
    assert shown["scheduler"]["quantum"] > 0
    assert main(["maintenance", "--json", "--dsn", dsn]) == 0
    assert {job["name"] for job in json.loads(capsys.readouterr().out)} >= {"prune_finished_runs"}
    assert main(["settings", "--json", "--dsn", dsn]) == 0
    assert "max_ttl_s" in {setting["name"] for setting in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize(
    "command",
    [["status"], ["trigger", "hello"], ["runs", "list"], ["worker", "tests.faults.tasks:tasks"]],
    ids=" ".join,
)
def test_a_missing_database_and_an_unknown_role_are_said_at_once_by_every_command(
    dsn: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The same line and exit code from every command, without waiting out the connect
    timeout (a mistake stays one: retrying cannot help). A command that kept retrying would
    end after the minute-long timeout with exit 1, "no database connection"."""
    missing = psycopg.conninfo.make_conninfo(dsn, dbname="fairlane_no_such_db", connect_timeout=60)
    assert main([*command, "--dsn", missing]) == 4
    line = _one_line(capsys)
    assert "fairlane_no_such_db" in line
    assert "fairlane migrate" in line

    stranger = psycopg.conninfo.make_conninfo(dsn, user="fairlane_no_such_role", connect_timeout=60)
    assert main([*command, "--dsn", stranger]) == 2
    assert "refused the login" in _one_line(capsys)


def test_a_task_spec_naming_a_missing_module_is_one_line(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", "app.task:tasks", "--dsn", dsn]) == 2
    line = _one_line(capsys)
    assert "cannot import app.task" in line
    assert "no module named 'app'" in line
    assert main(["worker", ":tasks", "--dsn", dsn]) == 2
    assert "names no module" in _one_line(capsys)


def test_a_reader_that_went_away_ends_the_command_quietly(dsn: str) -> None:
    """`fairlane status | head -0`: the pipe's reader is gone before the command writes, so
    its first write fails; it exits as a command killed by SIGPIPE would, without a message."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fairlane.cli", "status", "--dsn", dsn],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 128 + signal.SIGPIPE
    assert done.stderr == ""
