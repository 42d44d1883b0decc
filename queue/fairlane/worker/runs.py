"""The runs a worker holds, each in one explicit state, and the slots they take.

One ``RunTable`` owns every transition of every run and all of the worker's slot accounting;
the runners, the executor, the heartbeater, the writer, the wait service and the listener
report events to it (``claimed``, ``started``, ``waiting``, ``resumed``, ``detached``, ``returned``,
``settled``, ``written``, ``abandoned``, ``lease_lost``, ``cancel_requested``). A transition
the state machine does not allow raises ``IllegalTransition``. No I/O here: the table wakes
tasks through anyio events only.

    claimed ──> CLAIMED ──started──> RUNNING ──waiting──> WAITING
                                      │   ^──resumed────────┘ ──detached──> RELEASED
                                   returned
                                      v
                                   RETURNED ──settled(no outcome)────────────> RELEASED
                                      │ settled(outcome)                         ^
                                      v                                          │
                             UNWRITTEN (room among the unwritten) ──written───────┤
                             PARKED    (no room: keeps its slot)  ──written───────┘

A run holds a slot while CLAIMED, RUNNING, RETURNED or PARKED. A run whose outcome waits for
the writer frees its slot at once while at most ``concurrency`` outcomes are unwritten
(UNWRITTEN), so the claim that refills the slot overlaps the write; past that it keeps its slot
(PARKED) until a written outcome makes room, and a writer that cannot write stops the claims.
A waiting handler gives its slot up (and its runner is replaced meanwhile); it takes a slot
again, waiting for one, when it resumes. ``abandoned`` (the outcome was not written before the
lease lapsed) and a re-claim of a run already held let go of a finished run at once: it is
RELEASED, and its runner's later events leave it so.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from fairlane.worker.lease_store import Lease
from fairlane.worker.outcomes import Attempt
from fairlane.worker.primitives import GENERIC, Primitives
from fairlane.worker.run_state import (
    CLAIMED,
    HANDLER_DONE,
    HOLDS_SLOT,
    OUTCOME_PENDING,
    PARKED,
    RELEASED,
    RETURNED,
    RUNNING,
    STOP_CANCELED,
    STOP_LEASE_LOST,
    UNWRITTEN,
    WAITING,
    ActiveRun,
    IllegalTransition,
    RunState,
)
from fairlane.worker.stats import WorkerStats

if TYPE_CHECKING:
    from fairlane.worker.signals import TestSignals

log = logging.getLogger("fairlane.worker")


class RunTable:
    """Every run the worker holds (``held``, by run id) and the slots they take."""

    def __init__(
        self,
        concurrency: int,
        stats: WorkerStats | None = None,
        *,
        on_written: Callable[[], None] | None = None,
        on_runner_needed: Callable[[], None] | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.stats = stats if stats is not None else WorkerStats()
        self.held: dict[int, ActiveRun] = {}
        # Slots taken: runs in a state of HOLDS_SLOT.
        self.running = 0
        # Runs UNWRITTEN: at most ``concurrency``.
        self.unwritten = 0
        # Runs PARKED, oldest first: the next to take the room a written outcome makes.
        self._parked: deque[ActiveRun] = deque()
        # Runs a runner has and has not settled yet (what the shutdown waits for).
        self.executing = 0
        # Runners beyond ``concurrency``, left by handlers that waited and resumed.
        self.surplus_runners = 0
        self.primitives: Primitives = GENERIC
        self._slot_free = anyio.Event()
        self._idle = anyio.Event()
        self._handlers_idle = anyio.Event()
        # Written outcomes free database slots: the claimer tries again (the worker's wake-up).
        self._on_written = on_written
        # A handler gave its slot up and keeps its runner: another runner takes its place.
        self.on_runner_needed = on_runner_needed
        self.signals: TestSignals | None = None

    # -- the events ------------------------------------------------------------------------

    def claimed(self, active: ActiveRun) -> None:
        """A claim handed the run to this worker: it takes a slot."""
        previous = self.held.get(active.run.id)
        if active.state is not CLAIMED or previous is active:
            raise IllegalTransition(active.run.id, active.state, "claimed")
        if previous is not None:
            # The database took the lease back before we noticed and we claimed the run again:
            # the earlier attempt is stale. Stop it; it must not touch the new attempt's entry.
            self.lease_lost(previous)
            if previous.state in OUTCOME_PENDING or previous.state is RETURNED:
                # Its outcome, still unwritten, will not free its slot: the entry is replaced.
                self._release(previous)
        self.held[active.run.id] = active
        self.running += 1
        self.executing += 1
        if self.signals is not None:
            self.signals.claimed.emit(active.run.id)

    def started(self, active: ActiveRun) -> None:
        """A runner took the run and calls its handler."""
        if active.state is not CLAIMED:
            raise IllegalTransition(active.run.id, active.state, "started")
        active.state = RUNNING
        if self.signals is not None:
            self.signals.started.emit(active.run.id)

    def waiting(self, active: ActiveRun) -> None:
        """The handler waits without a slot (EXECUTING -> WAITING in the database)."""
        self._move(active, RUNNING, WAITING, "waiting")
        self.running -= 1
        if self.on_runner_needed is not None:
            self.on_runner_needed()
        self._slot_freed()
        if self.signals is not None:
            self.signals.waiting.emit(active.run.id)

    async def resumed(self, active: ActiveRun) -> None:
        """The waiting handler goes on (or stops): it takes a slot again, waiting for one,
        ahead of no one but never beyond ``concurrency``. The runner that took its place stays
        until it has finished a run."""
        if active.state is not WAITING:
            raise IllegalTransition(active.run.id, active.state, "resumed")
        while self.running >= self.concurrency:
            await self._slot_free.wait()
        active.state = RUNNING
        self.running += 1
        self.surplus_runners += 1
        if self.signals is not None:
            self.signals.resumed.emit(active.run.id)

    def detached(self, active: ActiveRun) -> None:
        """The waiting handler let go of its run (no lease in the database any more): the run
        is no longer this worker's, and the handler is dropped. It held no slot; its runner,
        replaced when it began to wait, is one too many now."""
        if active.state is not WAITING:
            raise IllegalTransition(active.run.id, active.state, "detached")
        self.stats.detached += 1
        self.surplus_runners += 1
        if self.signals is not None:
            self.signals.detached.emit(active.run.id)
        self._release(active)

    def returned(self, active: ActiveRun, started: float, now: float) -> Attempt:
        """The handler returned (or was cut short): what is left is deciding its outcome. A
        stop no longer cancels anything of it. A run let go of meanwhile stays RELEASED."""
        if active.state is RUNNING:
            active.state = RETURNED
        elif active.state is not RELEASED:
            raise IllegalTransition(active.run.id, active.state, "returned")
        active.done_at = now
        attempt = active.attempt = Attempt(active.run.task, now - started)
        return attempt

    def settled(self, active: ActiveRun, outcome_queued: bool) -> None:
        """Its runner is done with the run, whose outcome it handed the writer, or not (a lease
        lost, a cancel, a handler that never returned): the slot frees now, or once the
        outcome is written if there is no room among the unwritten."""
        self.executing -= 1
        if self.executing == 0:
            self._handlers_idle.set()
        state = active.state
        if state is RUNNING:
            # Something no handler raises (a BaseException) ended it: nothing to write.
            active.state = RETURNED
            outcome_queued = False
        elif state is RELEASED:
            return
        elif state is not RETURNED:
            self.executing += 1
            raise IllegalTransition(active.run.id, state, "settled")
        if not outcome_queued:
            self._release(active)
        elif self.unwritten < self.concurrency:
            self._to_unwritten(active)
        else:
            active.state = PARKED
            self._parked.append(active)
        if self.signals is not None:
            self.signals.settled.emit(active.run.id)

    def written(self, leases: Iterable[Lease]) -> None:
        """The writer wrote these outcomes, or the fence refused them: their runs are done."""
        held = self.held
        for lease in leases:
            active = held.get(lease.run_id)
            if active is not None and active.lease == lease and active.state in OUTCOME_PENDING:
                self._release(active)
        if self._on_written is not None:
            self._on_written()

    def abandoned(self, active: ActiveRun) -> None:
        """The run's outcome was not written before its lease lapsed (the writer cannot reach
        the database): this worker no longer vouches for it. The run will be reclaimed and run
        again; the writer still tries, and the fence refuses it if someone else has the run."""
        if active.state not in HANDLER_DONE:
            raise IllegalTransition(active.run.id, active.state, "abandoned")
        if active.state is RELEASED:
            return
        log.warning(
            "run %s: outcome not written before the lease lapsed; the run will be run again",
            active.run.id,
        )
        self.stats.lost_leases += 1
        self._release(active)

    def lease_lost(self, active: ActiveRun) -> None:
        """The lease is no longer ours (the database said so, or no beat confirmed it in time,
        or the run was claimed again): stop the handler. A run whose handler returned is left
        alone: its outcome may well have just ended the lease, and if the lease was really
        lost the fence refuses the write and the writer counts it."""
        if active.state in HANDLER_DONE:
            return
        if active.ctx.stop_reason is None:
            self.stats.lost_leases += 1
            log.warning("run %s: lease lost; stopping its handler", active.run.id)
            if self.signals is not None:
                self.signals.lease_lost.emit(active.run.id)
        active.stop(STOP_LEASE_LOST)

    def cancel_requested(self, run_id: int) -> None:
        """The run was cancelled while executing (the cancel channel): stop its handler."""
        active = self.held.get(run_id)
        if active is None or active.state in HANDLER_DONE or active.ctx.stop_reason is not None:
            # Not ours, or finishing already: the fence refuses whatever outcome it writes.
            return
        self.stats.canceled += 1
        log.info("run %s: canceled; stopping its handler", run_id)
        active.stop(STOP_CANCELED)
        if self.signals is not None:
            self.signals.canceled.emit(run_id)

    def stop_all(self, reason: str) -> None:
        """Stop every handler that has not returned (the shutdown, once the grace is over)."""
        for active in list(self.held.values()):
            if active.state not in HANDLER_DONE:
                active.stop(reason)

    def take_surplus_runner(self) -> bool:
        """Whether the runner asking should end: one more runs than ``concurrency`` since a
        handler that waited resumed on its own runner, and the pool shrinks back."""
        if self.surplus_runners > 0:
            self.surplus_runners -= 1
            return True
        return False

    # -- waiting for slots -----------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.concurrency - self.running

    async def slot_freed(self) -> None:
        """Return once a slot frees (or ``wake_slot_waiters`` is called)."""
        await self._slot_free.wait()

    def wake_slot_waiters(self) -> None:
        # Wakes every task waiting for a slot (the claimer, resuming handlers); each re-checks.
        # Nobody waiting: nothing to wake, and the event stays for the next one to wait.
        freed = self._slot_free
        if freed.statistics().tasks_waiting:
            self._slot_free = self.primitives.new_event()
            freed.set()

    async def until_idle(self) -> None:
        """Return once no run holds a slot."""
        if self.running:
            self._idle = anyio.Event()
            await self._idle.wait()

    async def until_handlers_settled(self) -> None:
        """Return once every runner has settled its run."""
        while self.executing:
            self._handlers_idle = anyio.Event()
            await self._handlers_idle.wait()

    # -- the transitions' parts --------------------------------------------------------------

    def _move(self, active: ActiveRun, before: RunState, after: RunState, event: str) -> None:
        if active.state is not before:
            raise IllegalTransition(active.run.id, active.state, event)
        active.state = after

    def _to_unwritten(self, active: ActiveRun) -> None:
        active.state = UNWRITTEN
        self.unwritten += 1
        self._free_slot()

    def _release(self, active: ActiveRun) -> None:
        """The run holds nothing any more; a parked run takes its room among the unwritten."""
        state = active.state
        active.state = RELEASED
        if state in HOLDS_SLOT:
            self._free_slot()
        elif state is UNWRITTEN:
            self.unwritten -= 1
            parked = self._parked
            while parked and self.unwritten < self.concurrency:
                waiting = parked.popleft()
                if waiting.state is PARKED:
                    self._to_unwritten(waiting)
        self._forget(active)
        if self.signals is not None:
            self.signals.released.emit(active.run.id)

    def _free_slot(self) -> None:
        self.running -= 1
        self._slot_freed()

    def _slot_freed(self) -> None:
        # As wake_slot_waiters, written out: this runs for every run.
        freed = self._slot_free
        if freed.statistics().tasks_waiting:
            self._slot_free = self.primitives.new_event()
            freed.set()
        if self.running == 0:
            self._idle.set()
        if self.signals is not None:
            self.signals.slot_freed.emit(self.free)

    def _forget(self, active: ActiveRun) -> None:
        """Stop tracking ``active``; a later attempt of the same run held here stays."""
        if self.held.get(active.run.id) is active:
            del self.held[active.run.id]
        # The run and its context point at each other: without this the pair and all it
        # holds wait for a full collection, whose cost grows with every run since the last.
        active.ctx._active = None

    # -- for tests and diagnostics -----------------------------------------------------------

    def check(self) -> None:
        """Raise AssertionError unless the counters agree with the states of the held runs."""
        states = [active.state for active in self.held.values()]
        unwritten = sum(state is UNWRITTEN for state in states)
        assert unwritten == self.unwritten, (unwritten, self.unwritten)
        assert 0 <= self.unwritten <= self.concurrency, self.unwritten
        assert RELEASED not in states
        parked = [a for a in self._parked if a.state is PARKED]
        assert len(parked) == sum(state is PARKED for state in states)
        if parked:
            assert self.unwritten == self.concurrency, "a parked run with room among the unwritten"
