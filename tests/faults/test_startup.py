"""A worker's start-up: a malformed DSN, a missing database or an unmigrated schema stop it at
once with one line and a documented exit status; an unreachable server is waited out, with
one warning when the outage starts and one line when it ends."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fairlane import AsyncClient, RunStatus, Worker
from fairlane.cli import main
from fairlane.cli.common import EXIT_SCHEMA
from fairlane.cli.common import EXIT_USAGE as EXIT_REFUSED
from tests.faults.tasks import tasks
from tests.helpers import run_status, wait_until
from tests.helpers.faults import Proxy, closed_port

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.faults.tasks:tasks"


def with_database(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo("", **params)


def at_port(dsn: str, port: int) -> str:
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=port)
    return make_conninfo("", **params)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        ("postgresql://127.0.0.1:notaport/x", "port 'notaport' is not a port number"),
        ("postgresql://127.0.0.1:99999/x", "port '99999' is not a port number"),
        ("host=127.0.0.1 bogus=1", 'invalid connection option "bogus"'),
        ("postgresql://u:secret@[::1:5432/x", "malformed database URL"),
        ("host=127.0.0.1 sslmode=bogus", 'invalid sslmode value: "bogus"'),
    ],
)
def test_malformed_dsn_exits_with_one_line(
    dsn: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["worker", TASKS, "--dsn", dsn])
    line = one_error_line(capsys)
    assert status == EXIT_REFUSED
    assert line.startswith("error: malformed database URL"), line
    assert reason in line
    assert "secret" not in line


def test_missing_database_exits_with_the_migrate_hint(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["worker", TASKS, "--dsn", with_database(dsn, "fairlane_no_such_database")])
    line = one_error_line(capsys)
    assert status == EXIT_SCHEMA
    assert "'fairlane_no_such_database' does not exist: run `fairlane migrate`" in line


def test_unmigrated_database_exits_with_the_migrate_hint(
    empty_database: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["worker", TASKS, "--dsn", empty_database()])
    line = one_error_line(capsys)
    assert status == EXIT_SCHEMA
    assert "not migrated" in line
    assert "run `fairlane migrate`" in line


def test_refused_login_exits_with_one_line(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    params = conninfo_to_dict(dsn)
    params["user"] = "fairlane_no_such_role"
    status = main(["worker", TASKS, "--dsn", make_conninfo("", **params)])
    line = one_error_line(capsys)
    assert status == EXIT_REFUSED
    assert "refused the login" in line
    assert "fairlane_no_such_role" in line


@pytest.mark.anyio
async def test_worker_waits_out_an_unreachable_server(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fairlane")
    info = db.info
    with Proxy(info.host, info.port) as proxy:
        worker = Worker(tasks, proxy.dsn(dsn), poll_interval=0.1)
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await anyio.sleep(2.0)
            assert not worker.wait_started(0), "started without a server"
            proxy.up()
            await wait_until(lambda: worker.wait_started(0), within=15, what="the worker")
            async with AsyncClient(dsn) as client:
                run_id = await client.trigger("noop")
            await wait_until(
                lambda: run_status(db, run_id) is RunStatus.COMPLETED, within=10, what="the run"
            )
            worker.stop()
    records = [r for r in caplog.records if r.name.startswith("fairlane")]
    assert not [r for r in records if r.exc_info], "no tracebacks"
    startup = [r for r in records if r.getMessage().startswith("start-up:")]
    warnings = [r for r in startup if r.levelno == logging.WARNING]
    ended = [r for r in startup if r.levelno == logging.INFO]
    assert len(warnings) == 1, [r.getMessage() for r in startup]
    assert "database unavailable" in warnings[0].getMessage()
    assert len(ended) == 1, [r.getMessage() for r in startup]
    assert "database available again after" in ended[0].getMessage()
    # Capped backoff: a handful of attempts in two seconds, not one per poll interval.
    assert 3 <= len(startup) - 1 <= 8, [r.getMessage() for r in startup]


@pytest.mark.anyio
async def test_worker_stopped_while_the_server_is_unreachable(dsn: str) -> None:
    worker = Worker(tasks, at_port(dsn, closed_port()))
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await anyio.sleep(0.5)
        started = time.monotonic()
        worker.stop()
    assert time.monotonic() - started < 1.0


def test_worker_command_during_an_outage_logs_one_warning(dsn: str) -> None:
    """The real command: no traceback per attempt, one warning, a clean exit on SIGTERM. The
    later attempts are logged at debug level only; the test waits for two of them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "queue"), str(ROOT)])}
    command = [sys.executable, "-m", "fairlane.cli", "--log-level", "debug", "worker", TASKS]
    command += ["--dsn", at_port(dsn, closed_port()), "--json"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        while sum("still unavailable" in line for line in lines) < 2:
            line = process.stderr.readline()
            assert line, f"the worker exited: {''.join(lines)}"
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        process.send_signal(signal.SIGTERM)
        out, rest = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    err = "".join(lines) + rest
    assert process.returncode == 0, err
    assert "Traceback" not in err, err
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, err
    assert "start-up: database unavailable" in warnings[0]
    assert out.strip().startswith("{"), out
