"""Counters a worker keeps about itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    claims: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    timed_out: int = 0
    released: int = 0
    # A lease the database said (or the local deadline showed) was no longer ours.
    lost_leases: int = 0
    # Outcome writes the fence refused: the run had been re-claimed or had ended.
    stale_writes: int = 0
    # Runs whose handler was stopped because the run was cancelled while it executed.
    canceled: int = 0
    heartbeats: int = 0
    wakeups: int = 0
    periodic_ticks: int = 0
    # Runs the cron schedules this worker fired made.
    scheduled_runs: int = 0
    # Statements that wrote handlers' metadata (each for every run with fields pending).
    metadata_writes: int = 0
    # Waiting handlers that let go of their run (it waits with no worker and no lease).
    detached: int = 0
    # Executions of a run with recorded calls to replay (after a detached wait, a crash, a
    # retry), the steps whose function ran, and the ones served from their record.
    replays: int = 0
    steps_executed: int = 0
    steps_replayed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
