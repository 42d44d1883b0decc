"""Running one step: a process of its own, its one JSON line labelled and timestamped.

Like the peer harness's ``run_all.sh``, a step that fails or prints no JSON line is recorded
as ``{"label": ..., "error": ...}`` rather than ending the sitting, and a step is stopped
after a time cap. A stopped step leaves its database behind; it is dropped by name (every
benchmark database ends in the process id of the run that made it).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql

from fairlane.tools.bench.suite.plan import Step

log = logging.getLogger("fairlane.tools.bench")

# Benchmark databases are named <prefix>_<scenario>_<pid>: fairlane's and the harness's.
DATABASE_PREFIXES = ("fairlane_bench_", "peers_")
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    cwd: Path | None = None
    env: Mapping[str, str] | None = None


def run_step(
    step: Step, launch: Launch, *, timeout: float, server: str, errors: IO[str]
) -> dict[str, Any]:
    """Run ``step`` and return its line; its stderr is appended to ``errors``."""
    shown = " ".join(launch.argv)
    log.info(">> %s: %s", step.label, shown)
    errors.write(f"== {step.label}: {shown}\n")
    errors.flush()
    process = subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=None if launch.env is None else dict(launch.env),
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        drop_leftovers(server, process.pid)
        return _line(step, process.pid, {"error": f"stopped after {timeout:g}s", "cmd": shown})
    except KeyboardInterrupt:
        # The step got the interrupt too; it is not left running, nor is its database.
        _stop(process)
        drop_leftovers(server, process.pid)
        raise
    result = _last_json(out)
    if process.returncode != 0 or result is None:
        drop_leftovers(server, process.pid)
        failure = {"error": f"exit {process.returncode}", "cmd": shown}
        return _line(step, process.pid, failure)
    return _line(step, process.pid, result)


def _line(step: Step, pid: int, result: Mapping[str, Any]) -> dict[str, Any]:
    head = {
        "label": step.label,
        "ts": round(time.time(), 3),
        "side": step.side.name,
        "case": step.case,
        "size": step.size,
        "rep": step.rep,
        "pid": pid,
        "load1": round(os.getloadavg()[0], 2),
    }
    # The step's own fields win except the suite's identification of it.
    return head | {key: value for key, value in result.items() if key not in head}


def _last_json(out: str) -> dict[str, Any] | None:
    """The step's one JSON line: the last line of its stdout, if it is a JSON object."""
    lines = out.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        return None
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL if the step is still there after a grace."""
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def drop_leftovers(server: str, pid: int) -> list[str]:
    """Drop the benchmark databases the process ``pid`` left on ``server``; their names."""
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=10) as admin:
            rows = admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"%\\_{pid}",)
            ).fetchall()
            names = [str(row[0]) for row in rows if str(row[0]).startswith(DATABASE_PREFIXES)]
            for name in names:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    except psycopg.Error as error:
        log.warning("could not drop the databases of step process %d: %s", pid, error)
        return []
    if names:
        log.warning("dropped databases left by step process %d: %s", pid, ", ".join(names))
    return names
