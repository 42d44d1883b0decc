"""The fixed pool of runner tasks that execute claimed runs, so a run costs no task of its own.

Each runner takes runs from the ready queue one at a time and executes them in one cancel
scope until a stop cancels it (worker/executor.py), then in a new one. It hands the outcome
value the executor returns to the writer and reports the run settled to the run table.
"""

from __future__ import annotations

from collections import deque

import anyio
from anyio.abc import TaskGroup

from fairlane.metrics.worker import WorkerMetrics
from fairlane.worker.executor import Outcome, execute, interrupted
from fairlane.worker.outcomes import OutcomeWriter
from fairlane.worker.primitives import GENERIC, Primitives
from fairlane.worker.registry import TaskRegistry
from fairlane.worker.run_state import STOP_CANCELED, ActiveRun
from fairlane.worker.runs import RunTable


class RunnerPool:
    def __init__(
        self,
        runs: RunTable,
        registry: TaskRegistry,
        writer: OutcomeWriter,
        metrics: WorkerMetrics,
        concurrency: int,
    ) -> None:
        self._runs = runs
        self._registry = registry
        self._writer = writer
        self._metrics = metrics
        self._concurrency = concurrency
        # Sync handlers and hooks run in threads, at most ``concurrency`` at a time.
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._ready = ReadyQueue()
        self._group: TaskGroup | None = None
        self.primitives: Primitives = GENERIC

    def start(self, group: TaskGroup, primitives: Primitives) -> None:
        self._group = group
        self.primitives = self._ready.primitives = primitives
        for _ in range(self._concurrency):
            group.start_soon(self._runner)

    def put(self, active: ActiveRun) -> None:
        """Hand a claimed run to the runners."""
        self._ready.put(active)

    def add_runner(self) -> None:
        """A handler gave its slot up and keeps its runner: another takes its place meanwhile."""
        if self._group is not None:
            self._group.start_soon(self._runner)

    async def _runner(self) -> None:
        while True:
            with self.primitives.new_scope() as scope:
                if await self._run_in(scope):
                    return

    async def _run_in(self, scope: anyio.CancelScope) -> bool:
        """Execute runs until ``scope`` is cancelled; True when this runner should end."""
        runs = self._runs
        while not scope.cancel_called:
            active = await self._ready.get()
            outcome: Outcome | None = None
            try:
                outcome = await execute(active, self._registry, runs, self._limiter, scope)
            except BaseException:
                outcome = interrupted(active, runs, scope)
                raise
            finally:
                self._settle(active, outcome)
            # An idle runner holds no finished run (nor its payload and result).
            del active, outcome
            if runs.take_surplus_runner():
                # A handler that waited has resumed on its own runner: the pool shrinks back.
                return True
        return False

    def _settle(self, active: ActiveRun, outcome: Outcome | None) -> None:
        if active.ctx.stop_reason == STOP_CANCELED and active.attempt is not None:
            # No outcome to write (the cancel ended the run), but the attempt ended.
            self._metrics.run_finished(active.attempt.task, "CANCELED", active.attempt.seconds)
        if outcome is not None:
            self._writer.put(outcome, active.attempt)
        self._runs.settled(active, outcome is not None)


class ReadyQueue:
    """Claimed runs waiting for a runner.

    Unbounded: the claimer never asks for more runs than there are idle runners, so whatever
    is here is picked up within a few loop turns. Idle runners are woken ``_WAKE_AHEAD`` at a
    time, and every runner that takes a run tops the wake-ups up while runs remain. Handlers
    that return without suspending are then run back to back by the runners already awake,
    rather than every idle runner being woken once per run; handlers that do suspend still
    get a runner each, ``_WAKE_AHEAD`` more per loop turn.
    """

    def __init__(self) -> None:
        self._items: deque[ActiveRun] = deque()
        self._waiters: deque[anyio.Event] = deque()
        self._waking = 0  # runners woken that have not resumed yet
        self.primitives = GENERIC

    def put(self, item: ActiveRun) -> None:
        self._items.append(item)
        self._wake_more()

    def _wake_more(self) -> None:
        wanted = min(len(self._items), _WAKE_AHEAD)
        while self._waking < wanted and self._waiters:
            self._waking += 1
            self._waiters.popleft().set()

    async def get(self) -> ActiveRun:
        while not self._items:
            waiter = self.primitives.new_event()
            self._waiters.append(waiter)
            try:
                await waiter.wait()
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                else:
                    # Woken, then cancelled: let another runner have the wake-up.
                    self._waking -= 1
                    self._wake_more()
                raise
            self._waking -= 1
        item = self._items.popleft()
        self._wake_more()
        return item


_WAKE_AHEAD = 16
