"""The ledger's verdict, for the runs of a scenario's database:
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
from collections.abc import Iterable
from dataclasses import dataclass

from tests.chaos.harness import Fleet, read
from tests.chaos.tasks import RETURNED, START_FAILED

LEASE_SLACK_S = 1.0


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
        runs=len(run_ids),
        executions=sum(len(runs) for runs in by_run.values()),
        duplicates=duplicates,
        excused_duplicates=excused,
        cut_by_lease=cut,
        worst_past_deadline=worst,
        problems=problems,
    )


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
