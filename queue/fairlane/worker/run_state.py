"""The states of a run this worker holds, and the run itself as the worker holds it
(``ActiveRun``). Which event moves a run from one state to the next is the run table's
(fairlane.worker.runs), which alone changes ``ActiveRun.state``."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from fairlane.models import ClaimedRun
from fairlane.worker.lease_store import Lease

if TYPE_CHECKING:
    from fairlane.worker.context import RunContext
    from fairlane.worker.outcomes import Attempt

STOP_SHUTDOWN = "shutdown"
STOP_LEASE_LOST = "lease_lost"
# The run was cancelled (Client.cancel): it is CANCELED already and its lease token cleared.
STOP_CANCELED = "canceled"


class RunState(enum.Enum):
    CLAIMED = "claimed"  # handed to the runners, not started
    RUNNING = "running"  # its handler runs
    WAITING = "waiting"  # its handler waits on children, a time or a token: no local slot
    RETURNED = "returned"  # its handler returned: the outcome is being decided (hooks)
    UNWRITTEN = "unwritten"  # its outcome waits for the writer, without a slot
    PARKED = "parked"  # its outcome waits for the writer, and it keeps its slot
    RELEASED = "released"  # it holds nothing any more


# The members as module globals: a member looked up on the class costs a descriptor call, and
# the run table reads several of them for every run.
CLAIMED, RUNNING, WAITING, RETURNED, UNWRITTEN, PARKED, RELEASED = RunState

# The states in which a run holds one of the worker's slots.
HOLDS_SLOT = frozenset({RunState.CLAIMED, RunState.RUNNING, RunState.RETURNED, RunState.PARKED})
# The states after its handler returned.
HANDLER_DONE = frozenset(
    {RunState.RETURNED, RunState.UNWRITTEN, RunState.PARKED, RunState.RELEASED}
)
# The states whose outcome is with the writer.
OUTCOME_PENDING = frozenset({RunState.UNWRITTEN, RunState.PARKED})


class IllegalTransition(RuntimeError):
    """A run was reported an event its state does not allow: a bug in the worker."""

    def __init__(self, run_id: int, state: RunState, event: str) -> None:
        super().__init__(f"run {run_id}: {event} is not allowed in state {state.name}")
        self.run_id, self.state, self.event = run_id, state, event


@dataclass(slots=True)
class ActiveRun:
    """A run this worker holds: from claim until its outcome is written or refused. Its
    ``state`` is changed by the ``RunTable`` alone."""

    run: ClaimedRun
    lease: Lease
    ctx: RunContext
    # Monotonic time until which the lease is known to hold (last confirmed heartbeat).
    confirmed_until: float
    state: RunState = RunState.CLAIMED
    # The scope its handler runs in: the runner's shared one, or its own (execute says which);
    # None until a runner takes it.
    scope: anyio.CancelScope | None = None
    # Monotonic times its handler started and returned.
    started_at: float = 0.0
    done_at: float = 0.0
    # Its task and how long its handler ran, once it has returned.
    attempt: Attempt | None = None
    # What was left of max_duration when the handler started to wait (waiting does not count).
    paused_budget: float | None = None
    # The tracer recording the run's span (``tracing.tracer()`` at its claim), or None.
    tracer: Any = None

    @property
    def handler_done(self) -> bool:
        return self.state in HANDLER_DONE

    @property
    def slot_held(self) -> bool:
        return self.state in HOLDS_SLOT

    def stop(self, reason: str) -> None:
        """Ask the handler to stop: cancel it if async, signal it if sync."""
        if self.ctx.stop_reason is None:
            self.ctx.stop_reason = reason
        self.ctx.request_stop()
        # Once its handler returned, the scope may be its runner's, serving the next run.
        if self.scope is not None and self.state not in HANDLER_DONE:
            self.scope.cancel()

    def pause_deadline(self) -> None:
        """The handler waits: stop counting its max_duration until ``resume_deadline``."""
        scope = self.scope
        if scope is None:
            return
        left = scope.deadline - anyio.current_time()
        # A deadline already past is left to fire: the run timed out before it waited.
        if self.paused_budget is None and math.isfinite(left) and left > 0:
            self.paused_budget = left
            scope.deadline = math.inf

    def resume_deadline(self) -> None:
        if self.paused_budget is not None and self.scope is not None:
            self.scope.deadline = anyio.current_time() + self.paused_budget
            self.paused_budget = None
