"""Keeping held leases alive: one statement per beat for every run the worker holds.

A lease counts as ours only until the last confirmed beat plus the lease length. When the
database says a lease is gone, or when no beat could confirm it in time (the database is
unreachable), the handler is stopped: someone else may own the run by now.

The deadlines are kept by a clock of their own (``enforce_deadlines``), which never waits on a
beat: a heartbeat statement that hangs (a stopped backend, a partition) cannot keep a handler
running past its lease. A beat itself is bounded by the heartbeat connection's statement
timeout; one that goes unanswered has its connection abandoned, and the next beat goes out on
a new one.
"""

from __future__ import annotations

import logging
import time

import anyio
import psycopg

from fairlane.connection import Outage
from fairlane.worker.connections import LoopConnection
from fairlane.worker.lease_store import LeaseStore
from fairlane.worker.presence import Presence
from fairlane.worker.run_state import ActiveRun
from fairlane.worker.runs import RunTable

log = logging.getLogger("fairlane.worker")


class Heartbeater:
    def __init__(
        self,
        store: LeaseStore,
        runs: RunTable,
        *,
        interval: float,
        outcome_timeout: float | None = None,
        presence: Presence | None = None,
    ) -> None:
        self._store = store
        # What it finds is reported to the run table: a lease lost, an outcome abandoned.
        self._runs = runs
        self._held = runs.held
        self._stats = runs.stats
        self.interval = interval
        # A run whose handler returned is kept alive this long for its outcome to be written;
        # then its lease may lapse, and the run table is told when it has.
        self.outcome_timeout = outcome_timeout
        self.paused = False
        # The worker's registry row, refreshed every tick whether or not it holds runs.
        self.presence = presence
        self.beat_failed = False
        self._outage = Outage("heartbeat", log)

    async def run(self, connection: LoopConnection) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self.enforce_deadlines)
            while True:
                await anyio.sleep(self.interval)
                if not self.paused:
                    await self.beat(connection)
                    # After a beat that failed, the next beat goes first: the registry row
                    # waits a tick rather than delay it by another connect attempt.
                    if self.presence is not None and not self.beat_failed:
                        await self.presence.tick(connection)

    async def beat(self, connection: LoopConnection) -> set[int]:
        """Extend every held lease; stop the handlers whose lease is lost. Returns those."""
        self.beat_failed = False
        sent_at = time.monotonic()
        active = [run for run in self._held.values() if self._keep_alive(run, sent_at)]
        if not active:
            return set()
        try:
            async with connection.use() as conn:
                lost = await self._store.heartbeat(conn, [run.lease for run in active])
        except psycopg.Error as error:
            # Leases hold until their deadline; the deadline clock stops what lapses.
            self._outage.failed(error)
            self.beat_failed = True
            await connection.discard()
            return set()
        self._outage.recovered()
        self._stats.heartbeats += 1
        for run in active:
            if self._held.get(run.run.id) is not run:
                continue  # finished (or superseded) while the beat was in flight
            if run.run.id in lost:
                self._runs.lease_lost(run)
            else:
                run.confirmed_until = max(run.confirmed_until, sent_at + self._store.lease_seconds)
        return lost

    def _keep_alive(self, run: ActiveRun, now: float) -> bool:
        """Whether a beat extends the run: while its handler runs, and for ``outcome_timeout``
        after it returned (its outcome is being written). A writer that cannot write within
        that stops extending the lease: the run goes back to the database's reclaim."""
        if not run.handler_done or self.outcome_timeout is None:
            return True
        return now - run.done_at < self.outcome_timeout

    async def enforce_deadlines(self) -> None:
        """Stop every handler whose lease was not confirmed in time, on time: sleeps until the
        earliest deadline (or a quarter lease), whatever the beats are doing."""
        tick = self._store.lease_seconds / 4
        while True:
            earliest = self.expire_unconfirmed()
            wait = tick if earliest is None else min(earliest - time.monotonic(), tick)
            await anyio.sleep(max(wait, 0.001))

    def expire_unconfirmed(self) -> float | None:
        """Stop the handlers whose deadline passed; returns the earliest deadline still ahead
        (None when no handler holds one)."""
        now = time.monotonic()
        earliest: float | None = None
        for run in list(self._held.values()):
            if run.handler_done:
                if run.confirmed_until < now:
                    self._runs.abandoned(run)
                elif earliest is None or run.confirmed_until < earliest:
                    earliest = run.confirmed_until
                continue
            if run.confirmed_until < now:
                if run.ctx.stop_reason is None:
                    log.warning(
                        "run %s: lease deadline passed without a confirmed heartbeat",
                        run.run.id,
                    )
                    self._runs.lease_lost(run)
            elif earliest is None or run.confirmed_until < earliest:
                earliest = run.confirmed_until
        return earliest
