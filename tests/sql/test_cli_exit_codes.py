"""The documented exit codes, each with one line on stderr and no traceback: 1 operational
(the server refuses connections), 2 usage (a value out of range), 3 not found, 4 schema not
migrated."""

from __future__ import annotations

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
