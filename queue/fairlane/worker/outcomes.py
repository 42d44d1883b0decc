"""Batched, fenced writing of run outcomes.

Handlers hand their outcome to the writer and move on; one loop writes everything that
accumulated while the previous write was in flight, so under load completions go out in
large batches and when idle each goes out at once.

Metadata a handler sets (``ctx.set_metadata``) is coalesced: the writer takes every run's
pending fields at most once per ``metadata_interval`` (at once after a quiet spell), and with
every batch of outcomes, metadata first, so a run's last progress lands before its outcome.

An outcome handed over with its ``Attempt`` is counted in the worker's metrics once the fence
has accepted it (fairlane_runs_finished_total, fairlane_run_duration_seconds); a refused one is
counted as a stale write only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from fairlane.payload import encode_json
from fairlane.worker.connections import LoopConnection
from fairlane.worker.lease_store import AsyncConn, Completion, Failure, Lease, LeaseStore
from fairlane.worker.stats import WorkerStats

if TYPE_CHECKING:
    from fairlane.metrics.worker import WorkerMetrics
    from fairlane.worker.context import RunContext

log = logging.getLogger("fairlane.worker")


class Attempt(NamedTuple):
    """What the metrics need of the attempt an outcome ends: its task and how long its
    handler ran."""

    task: str
    seconds: float


# A failure's status, as the attempt ended: a retry is RETRIED (the run itself is DELAYED).
_ENDED = {"DELAYED": "RETRIED"}


class OutcomeWriter:
    def __init__(
        self,
        store: LeaseStore,
        stats: WorkerStats,
        on_written: Callable[[Sequence[Lease]], None],
        *,
        metadata_interval: float = 0.5,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._store = store
        self._stats = stats
        self._metrics = metrics
        # The attempts of the outcomes not written yet, counted once the fence accepts them.
        self._attempts: dict[Lease, Attempt] = {}
        # Called with every lease whose outcome was written or refused: the lease is done. The
        # sequence is the writer's and is emptied afterwards: read it during the call.
        self._on_written = on_written
        self._completions: list[Completion] = []
        self._failures: list[Failure] = []
        self._releases: list[Lease] = []
        self._pending = anyio.Event()
        self.metadata_interval = metadata_interval
        # Runs whose handler set metadata since the last take, and fields taken but not written.
        self._metadata_runs: dict[Lease, RunContext] = {}
        self._metadata: dict[Lease, dict[str, Any]] = {}
        self._last_metadata_write = -math.inf
        self._flush_lock = anyio.Lock()

    def metadata_changed(self, lease: Lease, ctx: RunContext) -> None:
        """A handler set metadata (on the event loop). Written within ``metadata_interval``,
        or with the next outcomes."""
        first = not self._metadata_runs
        self._metadata_runs[lease] = ctx
        if first:
            self._pending.set()

    def put(self, outcome: Completion | Failure | Lease, attempt: Attempt | None = None) -> None:
        """Queue an outcome value of the executor: a completion, a failure or a release (the
        run's lease)."""
        if isinstance(outcome, Completion):
            self._completions.append(outcome)
            self._hand_over(outcome.lease, attempt)
        elif isinstance(outcome, Failure):
            self._failures.append(outcome)
            self._hand_over(outcome.lease, attempt)
        else:
            self.release(outcome, attempt)

    def complete(self, item: Completion, attempt: Attempt | None = None) -> None:
        self._completions.append(item)
        self._hand_over(item.lease, attempt)

    def fail(self, item: Failure, attempt: Attempt | None = None) -> None:
        self._failures.append(item)
        self._hand_over(item.lease, attempt)

    def release(self, lease: Lease, attempt: Attempt | None = None) -> None:
        self._releases.append(lease)
        self._hand_over(lease, attempt)

    def _hand_over(self, lease: Lease, attempt: Attempt | None) -> None:
        if attempt is not None:
            self._attempts[lease] = attempt
        self._pending.set()

    @property
    def has_pending(self) -> bool:
        """Outcomes not written yet (metadata is not counted: an abandoned sync handler may
        set it for ever; every flush writes what is pending of it)."""
        return self._has_outcomes

    @property
    def has_metadata(self) -> bool:
        return bool(self._metadata_runs or self._metadata)

    @property
    def _has_outcomes(self) -> bool:
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
            if not self._has_outcomes:
                # Only metadata: no sooner than metadata_interval after the last write of it;
                # an outcome cuts the wait short (and takes the metadata along).
                due = self._last_metadata_write + self.metadata_interval - anyio.current_time()
                if due > 0:
                    with anyio.move_on_after(due):
                        await self._pending.wait()
            # A write cancelled mid-statement is cancelled in the server too and would be lost
            # (the shutdown cancels this loop right after its final flush): finish it first.
            with anyio.CancelScope(shield=True):
                async with connection.use() as conn:
                    await self.flush(conn)
            if on_written is not None:
                on_written()

    def _take_metadata(self) -> dict[Lease, dict[str, Any]]:
        runs, self._metadata_runs = self._metadata_runs, {}
        taken, self._metadata = self._metadata, {}
        for lease, ctx in runs.items():
            fields = ctx.take_metadata()
            if fields:
                taken[lease] = {**taken.get(lease, {}), **fields}
        return taken

    async def flush(self, conn: AsyncConn) -> None:
        # One flush at a time (the shutdown flushes while the loop may still be writing), so
        # metadata taken later is never written before metadata taken earlier.
        async with self._flush_lock:
            await self._flush(conn)

    async def _flush(self, conn: AsyncConn) -> None:
        # Everything is taken at once, before any write: an outcome handed over while the
        # metadata is written goes in the next flush, after the metadata its handler set last.
        metadata = self._take_metadata()
        completions, self._completions = self._completions, []
        failures, self._failures = self._failures, []
        releases, self._releases = self._releases, []
        try:
            await self._write_metadata(conn, metadata)
            metadata = {}
            await self._write(conn, completions, failures, releases)
        except BaseException:
            # Not written, or not known to be: keep them for the next flush. Repeating a write
            # that did land is harmless, the fence refuses it. Metadata set since is newer: it
            # wins when the two are merged.
            for lease, fields in self._metadata.items():
                metadata[lease] = {**metadata.get(lease, {}), **fields}
            self._metadata = metadata
            self._completions[:0] = completions
            self._failures[:0] = failures
            self._releases[:0] = releases
            self._pending.set()
            raise

    async def _write_metadata(self, conn: AsyncConn, metadata: dict[Lease, dict[str, Any]]) -> None:
        if not metadata:
            return
        self._last_metadata_write = anyio.current_time()
        patches = [
            (lease, encode_json(fields, what="metadata")) for lease, fields in metadata.items()
        ]
        accepted = await self._store.set_metadata(conn, patches)
        self._stats.metadata_writes += 1
        refused = [lease.run_id for lease in metadata if lease.run_id not in accepted]
        if refused:
            # The run ended, or its lease was lost: its progress no longer matters.
            log.debug("fence refused metadata for runs %s", refused)

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
            leases = [c.lease for c in completions]
            self._count(leases, ["COMPLETED"] * len(leases), accepted)
            self._refused("complete", leases, accepted)
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
            leases = [f.lease for f in failures]
            ended = [_ENDED.get(f.next_status, f.next_status) for f in failures]
            self._count(leases, ended, accepted)
            self._refused("fail", leases, accepted)
            failures.clear()
        if releases:
            accepted = await self._store.release(conn, releases)
            self._stats.released += len(accepted)
            self._count(releases, ["RELEASED"] * len(releases), accepted)
            self._refused("release", releases, accepted)
            releases.clear()

    def _count(self, leases: Sequence[Lease], ended: Sequence[str], accepted: set[int]) -> None:
        """Written: each accepted outcome is counted in the metrics, by how it ended the
        attempt; a refused one is not (its attempt had been taken over). The batch goes to
        the metrics once per task and status."""
        attempts = self._attempts
        finished: dict[tuple[str, str], list[float]] = {}
        for lease, status in zip(leases, ended, strict=True):
            attempt = attempts.pop(lease, None)
            if attempt is not None and lease.run_id in accepted:
                durations = finished.get((attempt.task, status))
                if durations is None:
                    durations = finished[(attempt.task, status)] = []
                durations.append(attempt.seconds)
        if self._metrics is not None:
            for (task, status), durations in finished.items():
                self._metrics.runs_finished(task, status, durations)

    def _refused(self, what: str, leases: list[Lease], accepted: set[int]) -> None:
        refused = [lease.run_id for lease in leases if lease.run_id not in accepted]
        if refused:
            self._stats.stale_writes += len(refused)
            log.warning(
                "fence refused %s for runs %s: their lease was lost (re-claimed or ended)",
                what,
                refused,
                extra={"event": "stale_write_refused", "write": what, "run_ids": refused},
            )
        self._on_written(leases)
