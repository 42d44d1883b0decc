"""Where a worker's next claim starts walking each queue.

The claim reads each queue in the order of the queued index, from its head. A run claimed
leaves its entry there, dead, until a vacuum removes it, so over a long drain every claim walks
further through entries of runs claimed before (sql/claim/claim.sql). The worker keeps,
per queue, the claim order and id of the last run it claimed there, and sends them with its
next claim as floors: the walk starts after them.

A floor is only a hint. A run that sorts before it (a higher priority, a run handed back or
reclaimed) would be passed over, so floors are kept only while claims come back full: a claim
that comes back short drops them all, and a full scan (every notification of new work, and at
least once per poll interval) is made without them and sets them afresh. A run behind a floor
therefore waits at most until the next full scan, the same bound as an environment that gains
work while the known ones keep every claim full.

Claims take only runs of the worker's tasks, so a floor is the last run of those: runs of other
tasks before it are another worker's, and the walk passes over them only in full scans.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fairlane.engine.claim import ClaimFloorArrays
from fairlane.models import ClaimedRun

QueueKey = tuple[str, str]  # environment, queue


class ClaimFloors:
    """The floors of one worker's claims, by queue."""

    def __init__(self) -> None:
        self._floors: dict[QueueKey, tuple[datetime, int]] = {}

    def for_claim(self, full_scan: bool) -> ClaimFloorArrays | None:
        """What to send with a claim: nothing for a full scan, or while no floor is known."""
        if full_scan or not self._floors:
            return None
        keys = list(self._floors)
        return (
            [environment for environment, _ in keys],
            [queue for _, queue in keys],
            [self._floors[key][0] for key in keys],
            [self._floors[key][1] for key in keys],
        )

    def claimed(self, runs: Sequence[ClaimedRun], asked: int, full_scan: bool) -> None:
        """Record what a claim returned."""
        if len(runs) < asked:
            # A short claim walked every queue to its end: the next one starts at the heads.
            self._floors.clear()
            return
        if full_scan:
            self._floors.clear()
        for run in runs:
            if run.queue_order is None:
                continue
            key = (run.environment, run.queue)
            position = (run.queue_order, run.id)
            known = self._floors.get(key)
            if known is None or position > known:
                self._floors[key] = position

    def __len__(self) -> int:
        return len(self._floors)
