"""The chaos suite's pieces: ``fairlane worker`` processes to start, kill and find the backends
of, reads that survive a server restart, and runs to trigger and wait for. The ledger's verdict
is ``tests/chaos/verdict.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from fairlane import Client, TriggerRequest
from tests.chaos.tasks import LEDGER_DSN_VARIABLE
from tests.helpers import poll
from tests.helpers.faults import local_ports

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.chaos.tasks:tasks"


# -- reads that outlive a restart ------------------------------------------------------------


def read(dsn: str, sql: str, params: tuple[Any, ...] = (), *, within: float = 60.0) -> list[Any]:
    """The rows of ``sql`` on a connection of its own, retried while the server is away."""
    deadline = time.monotonic() + within
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def count(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> int:
    return int(read(dsn, sql, params)[0][0])


def completed(dsn: str) -> int:
    return count(dsn, "SELECT count(*) FROM fairlane.runs WHERE status = 'COMPLETED'")


def until_progress(dsn: str, since: float, *, within: float = 60.0) -> float:
    """Seconds from ``since`` (monotonic) until one more run completes than had then."""
    baseline = completed(dsn)
    poll(lambda: completed(dsn) > baseline, within=within, what="runs completing again")
    return time.monotonic() - since


def trigger_runs(dsn: str, count_: int, *, seconds: tuple[float, float], seed: int) -> list[int]:
    rng = random.Random(seed)
    requests = [
        TriggerRequest("chaos.work", {"n": n, "seconds": round(rng.uniform(*seconds), 3)})
        for n in range(count_)
    ]
    with Client(dsn) as client:
        return client.trigger_many(requests)


def all_runs(dsn: str) -> list[int]:
    return [run_id for (run_id,) in read(dsn, "SELECT id FROM fairlane.runs ORDER BY id")]


def drained(dsn: str, run_ids: list[int]) -> bool:
    final = ("COMPLETED", "FAILED", "CANCELED", "CRASHED", "TIMED_OUT", "EXPIRED")
    done = count(
        dsn,
        "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND status = ANY(%s)",
        (run_ids, list(final)),
    )
    return done == len(run_ids)


# -- worker processes ------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Fleet:
    """``fairlane worker`` processes on one database."""

    dsn: str
    directory: Path
    lease_seconds: float
    concurrency: int = 8
    statement_timeout: float = 2.0
    fast_claims: bool = False
    # --wait-in-memory, when given.
    wait_in_memory: float | None = None
    workers: list[WorkerProcess] = field(default_factory=list)
    killed: dict[int, float] = field(default_factory=dict)  # pid -> wall clock of the kill
    excused: set[int] = field(default_factory=set)

    def start(self, count_: int = 1) -> list[WorkerProcess]:
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
            TASKS,
            "--dsn",
            self.dsn,
            "--concurrency",
            str(self.concurrency),
            "--lease-seconds",
            str(self.lease_seconds),
            "--poll-interval",
            "0.2",
            "--statement-timeout",
            str(self.statement_timeout),
            "--connect-timeout",
            "2",
            "--shutdown-grace",
            "5",
            *(["--fast-claims"] if self.fast_claims else []),
            *(
                ["--wait-in-memory", str(self.wait_in_memory)]
                if self.wait_in_memory is not None
                else []
            ),
        ]
        started = []
        for _ in range(count_):
            log = self.directory / f"worker-{len(self.workers)}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
                )
            worker = WorkerProcess(process, log)
            self.workers.append(worker)
            started.append(worker)
        return started

    def alive(self) -> list[WorkerProcess]:
        return [worker for worker in self.workers if worker.process.poll() is None]

    def kill(self, worker: WorkerProcess) -> float:
        """SIGKILL: the worker's runs are left to their leases. Returns the wall-clock time."""
        os.kill(worker.pid, signal.SIGKILL)
        at = time.time()
        worker.process.wait(10)
        self.killed[worker.pid] = at
        self.excused.add(worker.pid)
        return at

    def stop_all(self) -> None:
        for worker in self.alive():
            worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.process.wait(30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(10)

    def tracebacks(self) -> list[str]:
        return [
            f"{worker.log.name}: {worker.log.read_text(errors='replace')[-3000:]}"
            for worker in self.workers
            if "Traceback" in worker.log.read_text(errors="replace")
        ]


def backend_of(dsn: str, worker: WorkerProcess, loop: str) -> int | None:
    """The server process behind ``worker``'s connection of ``loop`` (claim, heartbeat...)."""
    rows = read(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND client_port = ANY(%s)",
        (f"fairlane {loop}", sorted(local_ports(worker.pid))),
    )
    return int(rows[0][0]) if rows else None
