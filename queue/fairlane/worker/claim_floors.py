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

A worker keeps the floors of the queues it claimed from most recently, at most ``MAX_FLOORS``:
every claim sends them all and every environment it visits reads them, so with thousands of
tenants an unbounded set would cost each claim in proportion to every queue ever claimed from,
where a floor only pays in a queue deep enough to be claimed from again and again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fairlane.engine.claim import ClaimFloorArrays
from fairlane.models import ClaimedRun

QueueKey = tuple[str, str]  # environment, queue

MAX_FLOORS = 64


class ClaimFloors:
    """The floors of one worker's claims, by queue."""

    def __init__(self) -> None:
        self._floors: dict[QueueKey, tuple[datetime, int]] = {}

    def for_claim(self, full_scan: bool, announced: Sequence[str] = ()) -> ClaimFloorArrays | None:
        """What to send with a claim: nothing for a full scan, or while no floor is known.
        The floors of environments announced to have new work are dropped: a new run may sort
        before them (a higher priority)."""
        for environment in announced:
            for key in [key for key in self._floors if key[0] == environment]:
                del self._floors[key]
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
            known = self._floors.pop(key, None)
            self._floors[key] = position if known is None or position > known else known
        while len(self._floors) > MAX_FLOORS:
            # The least recently claimed from: dicts keep insertion order.
            del self._floors[next(iter(self._floors))]

    def __len__(self) -> int:
        return len(self._floors)
