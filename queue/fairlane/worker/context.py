"""What a handler knows about the run it executes."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fairlane.models import ClaimedRun

_EVENT_LOCK = threading.Lock()


@dataclass(slots=True)
class RunContext:
    """Passed to every handler as its first argument.

    ``stop_requested`` is set when the worker wants the handler to stop: its lease was lost,
    the run timed out, or the worker is shutting down. Async handlers are cancelled outright;
    sync handlers run in threads and cannot be, so long ones should check it.
    """

    run: ClaimedRun
    worker_id: str
    stop_reason: str | None = None
    # The event is made on first use: most runs never look at it, and a threading.Event costs
    # a lock and a condition. ``_stopped`` remembers a stop asked for before anyone looked.
    _stop_event: threading.Event | None = field(default=None, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    @property
    def stop_requested(self) -> threading.Event:
        event = self._stop_event
        if event is None:
            # Handlers in threads may look while the worker's loop asks for the stop.
            with _EVENT_LOCK:
                if self._stop_event is None:
                    self._stop_event = threading.Event()
                    if self._stopped:
                        self._stop_event.set()
                event = self._stop_event
        return event

    def request_stop(self) -> None:
        """Set ``stop_requested`` (for the worker; handlers only read it)."""
        with _EVENT_LOCK:
            self._stopped = True
            event = self._stop_event
        if event is not None:
            event.set()

    @property
    def run_id(self) -> int:
        return self.run.id

    @property
    def attempt(self) -> int:
        return self.run.attempt

    @property
    def max_attempts(self) -> int:
        return self.run.max_attempts

    @property
    def is_last_attempt(self) -> bool:
        return self.run.attempt >= self.run.max_attempts

    @property
    def task(self) -> str:
        return self.run.task

    @property
    def environment(self) -> str:
        return self.run.environment

    @property
    def queue(self) -> str:
        return self.run.queue

    @property
    def metadata(self) -> dict[str, Any]:
        return self.run.metadata

    @property
    def machine(self) -> str | None:
        return self.run.machine

    @property
    def lease_lost(self) -> bool:
        return self.stop_reason == "lease_lost"
