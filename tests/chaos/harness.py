"""The chaos suite's pieces: ``fairlane worker`` processes to start, kill and find the backends
of, reads that survive a server restart, and the ledger's verdict.

The verdict, for the runs a scenario triggered:
- nothing lost: every run is there, COMPLETED with its own result, and at least one of its
  executions returned;
- duplicates: a run executed more than once. Every execution but the last must belong to a
  worker process the scenario killed or stopped a connection of ("excused");
- leases: an execution that stopped did so at most ``LEASE_SLACK_S`` past the lease deadline
  its worker held, and never ran on more than that after the next execution of the run began;
- every execution of a worker that was not killed recorded its end.
An attempt whose start row could not be written did no work: its row (``start_failed``, if it
landed at all) is no execution.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from fairlane import Client, TriggerRequest
from tests.chaos.tasks import LEDGER_DSN_VARIABLE, RETURNED, START_FAILED
from tests.helpers.faults import local_ports

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.chaos.tasks:tasks"
LEASE_SLACK_S = 1.0
LEDGER_TABLE = """
CREATE TABLE chaos_ledger (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    lease_token uuid NOT NULL UNIQUE,
    worker_pid integer NOT NULL,
    started_at double precision NOT NULL,
    ended_at double precision,
    lease_deadline double precision,
    end_reason text
)
"""


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


def poll(condition: Callable[[], bool], *, within: float, what: str) -> float:
    """Seconds until ``condition`` held; fails after ``within``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what}: not within {within:g} s")
        time.sleep(0.05)
    return time.monotonic() - started


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
        dsn, "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND status = ANY(%s)",
        (run_ids, list(final)),
    )  # fmt: skip
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
    workers: list[WorkerProcess] = field(default_factory=list)
    killed: dict[int, float] = field(default_factory=dict)  # pid -> wall clock of the kill
    excused: set[int] = field(default_factory=set)

    def start(self, count_: int = 1) -> list[WorkerProcess]:
        env = {
            **os.environ, LEDGER_DSN_VARIABLE: self.dsn,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "queue")]),
        }  # fmt: skip
        command = [
            sys.executable, "-m", "fairlane.cli", "worker", TASKS, "--dsn", self.dsn,
            "--concurrency", str(self.concurrency), "--lease-seconds", str(self.lease_seconds),
            "--poll-interval", "0.2", "--statement-timeout", str(self.statement_timeout),
            "--connect-timeout", "2", "--shutdown-grace", "5",
        ]  # fmt: skip
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


# -- the ledger's verdict -------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    run_id: int
    attempt: int
    worker_pid: int
    started_at: float
    ended_at: float | None
    lease_deadline: float | None
    end_reason: str | None


@dataclass
class Verdict:
    runs: int
    executions: int
    duplicates: int
    excused_duplicates: int
    cut_by_lease: int
    worst_past_deadline: float
    problems: list[str]


def executions(dsn: str) -> dict[int, list[Execution]]:
    rows = read(
        dsn,
        "SELECT run_id, attempt, worker_pid, started_at, ended_at, lease_deadline, end_reason"
        " FROM chaos_ledger WHERE end_reason IS DISTINCT FROM %s ORDER BY run_id, started_at",
        (START_FAILED,),
    )
    by_run: dict[int, list[Execution]] = {}
    for row in rows:
        execution = Execution(*row)
        by_run.setdefault(execution.run_id, []).append(execution)
    return by_run


def verdict(dsn: str, run_ids: list[int], fleet: Fleet) -> Verdict:
    problems: list[str] = []
    rows = read(
        dsn, "SELECT id, status, result, payload FROM fairlane.runs WHERE id = ANY(%s)", (run_ids,)
    )
    if len(rows) != len(run_ids):
        problems.append(f"{len(run_ids) - len(rows)} runs lost")
    for run_id, status, result, payload in rows:
        if status != "COMPLETED" or result != payload["n"]:
            problems.append(f"run {run_id}: {status} with {result!r}")
    by_run = executions(dsn)
    duplicates = excused = cut = 0
    worst = -float("inf")
    for run_id in run_ids:
        runs = by_run.get(run_id, [])
        if not any(execution.end_reason == RETURNED for execution in runs):
            problems.append(f"run {run_id}: no execution returned ({runs})")
        if len(runs) > 1:
            duplicates += 1
            earlier_pids = {execution.worker_pid for execution in runs[:-1]}
            if earlier_pids <= fleet.excused:
                excused += 1
            else:
                problems.append(f"run {run_id} executed again after workers {earlier_pids}")
        for execution in runs:
            problems += _lease_problems(execution, fleet)
            if execution.ended_at is not None and execution.lease_deadline is not None:
                worst = max(worst, execution.ended_at - execution.lease_deadline)
            cut += execution.end_reason == "lease_lost"
        problems += _overlaps(runs, fleet)
    return Verdict(
        runs=len(run_ids), executions=sum(len(runs) for runs in by_run.values()),
        duplicates=duplicates, excused_duplicates=excused, cut_by_lease=cut,
        worst_past_deadline=worst, problems=problems,
    )  # fmt: skip


def _lease_problems(execution: Execution, fleet: Fleet) -> list[str]:
    if execution.ended_at is None:
        if execution.worker_pid in fleet.killed:
            return []
        return [f"run {execution.run_id}: an execution never recorded its end ({execution})"]
    deadline = execution.lease_deadline
    if deadline is not None and execution.ended_at > deadline + LEASE_SLACK_S:
        late = execution.ended_at - deadline
        return [f"run {execution.run_id}: ran {late:.2f} s past its lease deadline ({execution})"]
    return []


def _overlaps(runs: Iterable[Execution], fleet: Fleet) -> list[str]:
    problems = []
    for earlier, later in itertools.pairwise(runs):
        ended = earlier.ended_at
        if ended is None:
            ended = fleet.killed.get(earlier.worker_pid, float("inf"))
        if ended > later.started_at + LEASE_SLACK_S:
            problems.append(
                f"run {earlier.run_id}: executions overlapped by {ended - later.started_at:.2f} s"
                f" ({earlier} / {later})"
            )
    return problems


def report(scenario: str, result: Verdict, fleet: Fleet, **recoveries: float | list[float]) -> str:
    """One line of figures for the scenario."""
    times = []
    for name, value in recoveries.items():
        values = value if isinstance(value, list) else [value]
        times.append(f"{name} " + "/".join(f"{seconds:.2f}" for seconds in values) + " s")
    return (
        f"chaos {scenario}: {result.runs} runs, {result.executions} executions, "
        f"{len(fleet.killed)} kills, {result.duplicates} duplicates "
        f"({result.excused_duplicates} after a killed or stopped worker), "
        f"{result.cut_by_lease} cut by their lease, latest stop "
        f"{result.worst_past_deadline:+.2f} s from its lease deadline; "
        f"recovery: {', '.join(times) or 'n/a'}"
    )


def orphans_restarted_after(dsn: str, pid: int, killed_at: float) -> float:
    """Seconds from the kill of worker ``pid`` until the last run it held started again."""
    latest = killed_at
    for runs in executions(dsn).values():
        for earlier, later in itertools.pairwise(runs):
            if earlier.worker_pid == pid and earlier.ended_at is None:
                latest = max(latest, later.started_at)
    return latest - killed_at
