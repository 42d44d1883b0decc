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

A worker keeps the floors of the queues it claimed from most recently, at most ``MAX_FLOORS``,
and sends only those of queues claimed from in more than one claim: a floor pays only in a
queue deep enough to be claimed from again and again, while every floor sent costs each claim
its encoding and every environment visited its read. Over thousands of tenants with a few runs
each, a queue is rarely claimed from twice before newer ones push it out, and a claim that
carried the floors of the 64 queues it last took from was slower for them, not faster. A full
scan sets the floors afresh but keeps a queue's standing when it claims from it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from fairlane.engine.claim import ClaimFloorArrays
from fairlane.models import ClaimedRun

QueueKey = tuple[str, str]  # environment, queue

MAX_FLOORS = 64


@dataclass(frozen=True, slots=True)
class Floor:
    """The last run claimed in a queue, and whether an earlier claim took from it too."""

    position: tuple[datetime, int]  # queue order, id
    repeated: bool


class ClaimFloors:
    """The floors of one worker's claims, by queue."""

    def __init__(self) -> None:
        self._floors: dict[QueueKey, Floor] = {}

    def for_claim(self, full_scan: bool, announced: Sequence[str] = ()) -> ClaimFloorArrays | None:
        """What to send with a claim: nothing for a full scan, or while no queue was claimed
        from twice. The floors of environments announced to have new work are dropped: a new
        run may sort before them (a higher priority)."""
        for environment in announced:
            for key in [key for key in self._floors if key[0] == environment]:
                del self._floors[key]
        if full_scan:
            return None
        sent = [(key, floor.position) for key, floor in self._floors.items() if floor.repeated]
        if not sent:
            return None
        return (
            [environment for (environment, _), _ in sent],
            [queue for (_, queue), _ in sent],
            [order for _, (order, _) in sent],
            [run_id for _, (_, run_id) in sent],
        )

    def claimed(self, runs: Sequence[ClaimedRun], asked: int, full_scan: bool) -> None:
        """Record what a claim returned."""
        if len(runs) < asked:
            # A short claim walked every queue to its end: the next one starts at the heads.
            self._floors.clear()
            return
        latest: dict[QueueKey, tuple[datetime, int]] = {}
        for run in runs:
            if run.queue_order is None:
                continue
            key = (run.environment, run.queue)
            position = (run.queue_order, run.id)
            known = latest.get(key)
            if known is None or position > known:
                latest[key] = position
        earlier = self._floors
        if full_scan:
            # The scan started at the heads: its positions replace every floor.
            self._floors = {}
        for key, position in latest.items():
            before = earlier.pop(key, None)
            if before is not None and not full_scan:
                position = max(position, before.position)
            self._floors[key] = Floor(position, repeated=before is not None)
        while len(self._floors) > MAX_FLOORS:
            # The least recently claimed from: dicts keep insertion order.
            del self._floors[next(iter(self._floors))]

    def __len__(self) -> int:
        return len(self._floors)
