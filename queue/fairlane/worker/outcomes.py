"""Batched, fenced writing of run outcomes.

Handlers hand their outcome to the writer and move on; one loop writes everything that
accumulated while the previous write was in flight, so under load completions go out in
large batches and when idle each goes out at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from fairlane.worker.connections import LoopConnection
from fairlane.worker.lease_store import AsyncConn, Completion, Failure, Lease, LeaseStore
from fairlane.worker.stats import WorkerStats

log = logging.getLogger("fairlane.worker")


class OutcomeWriter:
    def __init__(
        self,
        store: LeaseStore,
        stats: WorkerStats,
        on_written: Callable[[set[Lease]], None],
    ) -> None:
        self._store = store
        self._stats = stats
        # Called with every lease whose outcome was written or refused: the lease is done.
        self._on_written = on_written
        self._completions: list[Completion] = []
        self._failures: list[Failure] = []
        self._releases: list[Lease] = []
        self._pending = anyio.Event()

    def complete(self, item: Completion) -> None:
        self._completions.append(item)
        self._pending.set()

    def fail(self, item: Failure) -> None:
        self._failures.append(item)
        self._pending.set()

    def release(self, lease: Lease) -> None:
        self._releases.append(lease)
        self._pending.set()

    @property
    def has_pending(self) -> bool:
        return bool(self._completions or self._failures or self._releases)

    @property
    def pending_count(self) -> int:
        return len(self._completions) + len(self._failures) + len(self._releases)

    async def run(
        self, connection: LoopConnection, *, on_written: Callable[[], None] | None = None
    ) -> None:
        """Write batches until cancelled; call ``flush`` afterwards to drain the remainder.
        Each write is bounded by the connection's statement timeout."""
        while True:
            await self._pending.wait()
            self._pending = anyio.Event()
            # A write cancelled mid-statement is cancelled in the server too and would be lost
            # (the shutdown cancels this loop right after its final flush): finish it first.
            with anyio.CancelScope(shield=True):
                async with connection.use() as conn:
                    await self.flush(conn)
            if on_written is not None:
                on_written()

    async def flush(self, conn: AsyncConn) -> None:
        completions, self._completions = self._completions, []
        failures, self._failures = self._failures, []
        releases, self._releases = self._releases, []
        try:
            await self._write(conn, completions, failures, releases)
        except BaseException:
            # Not written, or not known to be: keep them for the next flush. Repeating a write
            # that did land is harmless, the fence refuses it.
            self._completions[:0] = completions
            self._failures[:0] = failures
            self._releases[:0] = releases
            self._pending.set()
            raise

    async def _write(
        self,
        conn: AsyncConn,
        completions: list[Completion],
        failures: list[Failure],
        releases: list[Lease],
    ) -> None:
        # Each list is emptied once written, so a failure later on does not repeat it.
        if completions:
            accepted = await self._store.complete(conn, completions)
            self._stats.completed += len(accepted)
            self._refused("complete", [c.lease for c in completions], accepted)
            completions.clear()
        if failures:
            accepted = await self._store.fail(conn, failures)
            for item in failures:
                if item.lease.run_id in accepted:
                    if item.next_status == "DELAYED":
                        self._stats.retried += 1
                    elif item.next_status == "TIMED_OUT":
                        self._stats.timed_out += 1
                    else:
                        self._stats.failed += 1
            self._refused("fail", [f.lease for f in failures], accepted)
            failures.clear()
        if releases:
            accepted = await self._store.release(conn, releases)
            self._stats.released += len(accepted)
            self._refused("release", releases, accepted)
            releases.clear()

    def _refused(self, what: str, leases: list[Lease], accepted: set[int]) -> None:
        refused = [lease.run_id for lease in leases if lease.run_id not in accepted]
        if refused:
            self._stats.stale_writes += len(refused)
            log.warning(
                "fence refused %s for runs %s: their lease was lost (re-claimed or ended)",
                what,
                refused,
            )
        self._on_written(set(leases))
