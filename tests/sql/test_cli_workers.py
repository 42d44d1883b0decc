"""``fairlane workers`` (table and ``--json``) and the unserved-tasks section of ``fairlane
status``, over registry rows written here."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger_many
from fairlane.cli import main

REGISTER = (
    "INSERT INTO fairlane.workers (id, host, pid, version, tasks, environments, queues,"
    " concurrency, stale_after_s, last_seen_at)"
    " VALUES (%s, 'box', 42, '9.9', %s, %s, %s, 8, 30, now() - %s::interval)"
)


@pytest.fixture
def registered(db: psycopg.Connection[Any]) -> None:
    db.execute(REGISTER, ("w-live", ["mail", "fairlane.batch_item"], ["acme"], None, "1 second"))
    db.execute(REGISTER, ("w-stale", ["bill"], None, ["slow"], "1 hour"))
    trigger_many(
        db,
        [TriggerRequest("mail", environment="acme"), TriggerRequest("bill", environment="acme")],
    )
    db.commit()


@pytest.mark.usefixtures("registered")
def test_workers_prints_a_table(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workers", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    live = next(line for line in lines if line.startswith("w-live"))
    assert " live " in live
    assert "acme / all / mail" in live
    assert "fairlane.batch_item" not in live
    stale = next(line for line in lines if line.startswith("w-stale"))
    assert " stale " in stale
    assert "all / slow / bill" in stale
    assert "tasks with queued runs and no live worker serving them:" in out
    (bill,) = [line for line in lines if " bill " in line and line.startswith("  acme")]
    assert bill.split()[:3] == ["acme", "bill", "1"]


@pytest.mark.usefixtures("registered")
def test_workers_json(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workers", "--json", "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    workers = {worker["id"]: worker for worker in shown["workers"]}
    assert workers["w-live"]["live"] is True
    assert workers["w-live"]["environments"] == ["acme"]
    assert workers["w-live"]["queues"] is None
    assert (workers["w-live"]["pid"], workers["w-live"]["host"]) == (42, "box")
    assert workers["w-stale"]["live"] is False
    assert [(t["environment"], t["task"]) for t in shown["unserved_tasks"]] == [("acme", "bill")]
    assert shown["unserved_tasks"][0]["queues"] == ["default"]


@pytest.mark.usefixtures("registered")
def test_status_names_the_unserved_tasks(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "tasks with queued runs and no live worker serving them:" in out
    assert any(line.split()[:2] == ["acme", "bill"] for line in out.splitlines())


def test_workers_says_when_none_is_registered(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workers", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.strip() == "no worker is registered"
    assert main(["status", "--dsn", dsn]) == 0
    assert "no live worker" not in capsys.readouterr().out


@pytest.mark.usefixtures("registered")
def test_trigger_warns_of_a_task_no_live_worker_serves(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo of a served task is queued with a warning naming the closest task; `--strict`
    refuses it and writes nothing; a served task triggers quietly."""
    before = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert main(["trigger", "mial", "--environment", "acme", "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: no live worker serves task 'mial' in acme/default")
    assert "(did you mean 'mail'?)" in err
    assert db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (int(out),)).fetchone() == (
        "QUEUED",
    )

    # The stale worker's task does not count, nor a live one's outside its environments.
    for task, environment in (("bill", "acme"), ("mail", "globex")):
        assert main(["trigger", task, "--environment", environment, "--strict", "--dsn", dsn]) == 2
        assert "nothing triggered (--strict)" in capsys.readouterr().err
    after = db.execute("SELECT count(*) FROM fairlane.runs").fetchone()
    assert after is not None
    assert before is not None
    assert after[0] == before[0] + 1

    assert main(["trigger", "mail", "--environment", "acme", "--strict", "--dsn", dsn]) == 0
    assert capsys.readouterr().err == ""
