"""Keeping held leases alive: one statement per beat for every run the worker holds.

A lease counts as ours only until the last confirmed beat plus the lease length. When the
database says a lease is gone, or when no beat could confirm it in time (the database is
unreachable), the handler is stopped: someone else may own the run by now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import psycopg

from fairlane.worker.connections import LoopConnection
from fairlane.worker.executor import ActiveRun
from fairlane.worker.lease_store import LeaseStore
from fairlane.worker.stats import WorkerStats

log = logging.getLogger("fairlane.worker")


class Heartbeater:
    def __init__(
        self,
        store: LeaseStore,
        held: dict[int, ActiveRun],
        stats: WorkerStats,
        on_lost: Callable[[ActiveRun], None],
        *,
        interval: float,
    ) -> None:
        self._store = store
        self._held = held
        self._stats = stats
        self._on_lost = on_lost
        self.interval = interval
        self.paused = False

    async def run(self, connection: LoopConnection) -> None:
        while True:
            await anyio.sleep(self.interval)
            if not self.paused:
                await self.beat(connection)
            self.expire_unconfirmed()

    async def beat(self, connection: LoopConnection) -> set[int]:
        """Extend every held lease; stop the handlers whose lease is lost. Returns those."""
        active = list(self._held.values())
        if not active:
            return set()
        sent_at = time.monotonic()
        try:
            conn = await connection.get()
            lost = await self._store.heartbeat(conn, [run.lease for run in active])
        except psycopg.Error:
            log.warning("heartbeat failed; leases hold until their deadline", exc_info=True)
            await connection.discard()
            return set()
        self._stats.heartbeats += 1
        for run in active:
            if self._held.get(run.run.id) is not run:
                continue  # finished (or superseded) while the beat was in flight
            if run.run.id in lost:
                self._on_lost(run)
            else:
                run.confirmed_until = sent_at + self._store.lease_seconds
        return lost

    def expire_unconfirmed(self) -> None:
        now = time.monotonic()
        for run in list(self._held.values()):
            if run.confirmed_until < now and not run.handler_done:
                log.warning(
                    "run %s: lease deadline passed without a confirmed heartbeat", run.run.id
                )
                self._on_lost(run)
