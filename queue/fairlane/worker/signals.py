"""Test signals: what a worker's runs went through, for a test to await instead of sleeping.

Off by default (``Worker.signals`` is None, and each event costs one attribute check); a test
turns them on before the worker runs::

    signals = worker.enable_test_signals()
    async with running(worker):
        run_id = await trigger(...)
        await signals.released.wait_for(run_id)

Every signal keeps what it was emitted (a run id; ``slot_freed``: the slots then free) in
order; ``next()`` takes the oldest not taken yet, waiting for one, and ``wait_for`` takes
values until one matches. ``TestSignals.order`` keeps every emission of every signal in the
order they came. Use them on the worker's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Signal(Generic[T]):
    def __init__(self, name: str, order: list[tuple[str, object]] | None = None) -> None:
        self.name = name
        self._values: deque[T] = deque()
        self._arrived = anyio.Event()
        # Every value ever emitted, taken or not (for assertions after the fact).
        self.history: list[T] = []
        # Shared by the signals of one worker: every emission of any of them, in order.
        self._order = order if order is not None else []

    def emit(self, value: T) -> None:
        self._values.append(value)
        self.history.append(value)
        self._order.append((self.name, value))
        self._arrived.set()

    async def next(self, within: float = 10.0) -> T:
        """The oldest value not taken yet; TimeoutError if none comes ``within`` seconds."""
        with anyio.fail_after(within):
            while not self._values:
                self._arrived = anyio.Event()
                await self._arrived.wait()
        return self._values.popleft()

    async def wait_for(self, value: T | Callable[[T], bool], within: float = 10.0) -> T:
        """Take values until one equals ``value`` (or satisfies it, a predicate)."""
        matches: Callable[[T], bool] = (
            value if callable(value) else lambda seen: bool(seen == value)
        )
        with anyio.fail_after(within):
            while True:
                seen = await self.next(within=within)
                if matches(seen):
                    return seen

    def clear(self) -> None:
        self._values.clear()

    def __repr__(self) -> str:
        return f"Signal({self.name}, pending={list(self._values)})"


class TestSignals:
    """One signal per event of a run's state machine (fairlane.worker.runs)."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        # Every emission of every signal below, in order: (signal name, value).
        self.order: list[tuple[str, object]] = []
        order = self.order
        self.claimed: Signal[int] = Signal("claimed", order)
        self.started: Signal[int] = Signal("started", order)
        self.waiting: Signal[int] = Signal("waiting", order)
        self.resumed: Signal[int] = Signal("resumed", order)
        self.detached: Signal[int] = Signal("detached", order)
        # The runner is done with the run and its outcome went to the writer (or there is none).
        self.settled: Signal[int] = Signal("settled", order)
        # The run holds nothing any more: its outcome written or refused, or none to write.
        self.released: Signal[int] = Signal("released", order)
        self.lease_lost: Signal[int] = Signal("lease_lost", order)
        self.canceled: Signal[int] = Signal("canceled", order)
        self.slot_freed: Signal[int] = Signal("slot_freed", order)

    def index(self, name: str, value: object) -> int:
        """Where (signal ``name``, ``value``) was first emitted among all of them (ValueError
        if it was not)."""
        return self.order.index((name, value))
