"""A worker's row in the workers registry (sql/worker/registry.sql).

The row is inserted at start, refreshed by every heartbeat tick (one UPDATE on the heartbeat
connection, whether or not the worker holds runs) and deleted at a clean stop. The row says
for how long it stays good without a refresh, ``stale_after_s``: the worker's lease, and never
less than three heartbeat intervals. A worker not seen for that long has lost every lease it
held and claims nothing, so the views count it out and ``prune_dead_workers`` deletes its row.
A worker that was only cut off that long finds its row gone at its next tick and registers
again.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import psycopg

from fairlane.connection import Outage
from fairlane.engine import engine
from fairlane.engine.statement import first_async
from fairlane.engine.workers import Registration
from fairlane.worker.connections import LoopConnection

log = logging.getLogger("fairlane.worker")

# Beats a worker may miss (at least) before it counts as gone.
MISSED_BEATS = 3


def fairlane_version() -> str:
    try:
        return metadata.version("fairlane")
    except metadata.PackageNotFoundError:
        return "unknown"


def stale_after(lease_seconds: float, heartbeat_interval: float) -> float:
    """How long a worker's row stays good without a refresh (see the module's docstring)."""
    return max(lease_seconds, MISSED_BEATS * heartbeat_interval)


class Presence:
    def __init__(
        self,
        schema: str,
        worker_id: str,
        *,
        tasks: Sequence[str],
        environments: Sequence[str] | None,
        queues: Sequence[str] | None,
        concurrency: int,
        stale_after_s: float,
    ) -> None:
        self._workers = engine(schema).workers
        self.registration = Registration(
            id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=fairlane_version(),
            tasks=tuple(tasks),
            environments=None if environments is None else tuple(environments),
            queues=None if queues is None else tuple(queues),
            concurrency=concurrency,
            stale_after_s=stale_after_s,
        )
        self.registered = False
        # Set when the worker is asked to stop; the next tick says so.
        self.stopping = False
        self.ticks = 0
        self._outage = Outage("registry", log)

    async def tick(self, connection: LoopConnection) -> None:
        """Register, or refresh the row (registering again when it was pruned). A failure is
        logged once per outage and tried again at the next tick."""
        try:
            async with connection.use() as conn:
                await self._tick(conn)
        except psycopg.Error as error:
            self._outage.failed(error)
            await connection.discard()
            return
        self._outage.recovered()
        self.ticks += 1

    async def _tick(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self.registered:
            touched = await first_async(
                conn, self._workers.touch(self.registration.id, stopping=self.stopping)
            )
            if touched is not None:
                return
            log.warning("worker %s: its registry row was pruned; registering again", self.id)
        await first_async(conn, self._workers.register(self.registration))
        self.registered = True
        if self.stopping:
            await first_async(conn, self._workers.touch(self.registration.id, stopping=True))

    async def leave(self, connection: LoopConnection) -> None:
        """Delete the row at a clean stop. A failure leaves it to ``prune_dead_workers``, and
        so does a connection an outage took: a stop never waits for a reconnect to leave."""
        if connection.current is None:
            log.info("worker %s: left to the registry's pruning (no connection)", self.id)
            return
        try:
            async with connection.use() as conn:
                await first_async(conn, self._workers.deregister(self.registration.id))
        except psycopg.Error as error:
            log.warning("worker %s: could not leave the registry: %s", self.id, error)
            await connection.discard()
        self.registered = False

    @property
    def id(self) -> str:
        return self.registration.id
