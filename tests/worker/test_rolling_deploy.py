"""A rolling deploy that adds a task: runs of the new task, triggered while only workers of the
old release run, wait QUEUED (the old workers' claims pass over them) until a worker of the
new release starts; none fails with UNKNOWN_TASK, and every run executes exactly once.

Real ``fairlane worker`` processes, one per release, side by side on one database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, trigger_many
from tests.helpers import poll
from tests.worker.deploy_tasks import LEDGER_DSN_VARIABLE, LEDGER_TABLE

ROOT = Path(__file__).resolve().parents[2]


class Workers:
    """``fairlane worker`` processes of the releases' task sets, on one database."""

    def __init__(self, dsn: str, directory: Path) -> None:
        self.dsn = dsn
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, registry: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            LEDGER_DSN_VARIABLE: self.dsn,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "queue")]),
        }
        command = [
            sys.executable,
            "-m",
            "fairlane.cli",
            "worker",
            f"tests.worker.deploy_tasks:{registry}",
            "--dsn",
            self.dsn,
            "--concurrency",
            "4",
            "--poll-interval",
            "0.2",
            "--shutdown-grace",
            "5",
        ]
        log = self.directory / f"{registry}-{len(self.processes)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def logs(self) -> str:
        return "\n".join(log.read_text(errors="replace") for log in self.directory.glob("*.log"))


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    fleet = Workers(dsn, tmp_path)
    try:
        yield fleet
    finally:
        fleet.stop()


def trigger(db: psycopg.Connection[Any], task: str, count: int) -> list[int]:
    return trigger_many(db, [TriggerRequest(task, n, environment="app") for n in range(count)])


def statuses(db: psycopg.Connection[Any], ids: list[int]) -> dict[int, tuple[str, int]]:
    rows = db.execute(
        "SELECT id, status, attempts FROM fairlane.runs WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return {run_id: (status, attempts) for run_id, status, attempts in rows}


def all_completed(db: psycopg.Connection[Any], ids: list[int]) -> bool:
    return all(status == "COMPLETED" for status, _ in statuses(db, ids).values())


def test_a_new_task_waits_for_the_new_release_and_runs_once(
    dsn: str, db: psycopg.Connection[Any], workers: Workers
) -> None:
    db.execute(LEDGER_TABLE)
    old = workers.start("old_tasks")
    first_a = trigger(db, "deploy.a", 10)
    poll(lambda: all_completed(db, first_a), within=60, what="the old release runs deploy.a")

    # Only the old release runs: deploy.b is triggered ahead of more deploy.a in the queue.
    early_b = trigger(db, "deploy.b", 20)
    later_a = trigger(db, "deploy.a", 10)
    poll(lambda: all_completed(db, later_a), within=30, what="deploy.a behind deploy.b")
    # Every claim that took those walked past the runs of deploy.b, and left them.
    assert set(statuses(db, early_b).values()) == {("QUEUED", 0)}

    new = workers.start("new_tasks")
    late = trigger(db, "deploy.b", 10) + trigger(db, "deploy.a", 10)
    everything = first_a + early_b + later_a + late
    poll(lambda: all_completed(db, everything), within=60, what="every run completed")
    workers.stop()
    assert (old.returncode, new.returncode) == (0, 0), workers.logs()

    rows = db.execute(
        "SELECT id, attempts, error, attempt_errors FROM fairlane.runs WHERE id = ANY(%s)",
        (everything,),
    ).fetchall()
    assert len(rows) == len(everything)
    assert all(attempts == 1 for _, attempts, _, _ in rows), rows
    assert all(error is None and history is None for _, _, error, history in rows), rows
    assert "UNKNOWN_TASK" not in workers.logs()
    ledger = db.execute("SELECT run_id, attempt, task, worker_pid FROM deploy_ledger").fetchall()
    assert sorted(run_id for run_id, *_ in ledger) == sorted(everything), "each ran exactly once"
    assert {attempt for _, attempt, _, _ in ledger} == {1}
    b_pids = {pid for _, _, task, pid in ledger if task == "deploy.b"}
    assert b_pids == {new.pid}, "only the new release has deploy.b"
    assert old.pid in {pid for _, _, task, pid in ledger if task == "deploy.a"}
