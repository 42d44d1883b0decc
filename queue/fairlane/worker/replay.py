"""Replaying a handler: the calls its run recorded (steps and waits, by call position) and the
private exception that drops a handler whose run let go of its worker.

A handler's ``ctx.step`` calls and waits share one position counter. Each position's call is
recorded in ``run_steps`` (sql/waitpoints/steps.sql): a step with its JSON result once its
function returned, a wait in the transaction that makes it. A later execution of the same run
(a replay) reads them (``Replay``), and at each position checks that the handler asks for the
same kind and name (``ReplayMismatchError`` otherwise), then serves what was recorded: a
completed step's result without calling its function, a wait whose waitpoints completed its
results without a statement. docs/durable-execution.md states what is kept across what.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio.from_thread

from fairlane.engine.journal import RecordedCall
from fairlane.errors import ReplayMismatchError
from fairlane.payload import encode_json
from fairlane.waitpoints import WaitResult

if TYPE_CHECKING:
    from fairlane.worker.context import RunContext
    from fairlane.worker.run_state import ActiveRun
    from fairlane.worker.waiting import WaitService

STEP = "STEP"
WAIT = "WAIT"


class Suspended(BaseException):
    """Raised from a wait whose run let go of its worker: it unwinds the handler (a
    BaseException, so that ``except Exception`` in a handler does not keep it going) up to the
    executor, which writes nothing. Handlers must not catch it."""


class Replay:
    """The calls a run recorded, by position, as an execution of the run reads them."""

    __slots__ = ("_calls", "run_id", "served")

    def __init__(self, run_id: int, calls: list[RecordedCall]) -> None:
        self.run_id = run_id
        self._calls = {call.position: call for call in calls}
        # How many recorded calls this execution was served (a replay when any).
        self.served = 0

    def __len__(self) -> int:
        return len(self._calls)

    def at(self, position: int, kind: str, name: str) -> RecordedCall | None:
        """What was recorded at ``position``, after checking that it is what is asked."""
        call = self._calls.get(position)
        if call is None:
            return None
        if call.kind != kind or call.name != name:
            raise ReplayMismatchError(self.run_id, position, (call.kind, call.name), (kind, name))
        return call

    def completed_step(
        self, position: int, name: str, wait_attempt: int, per_attempt: bool
    ) -> RecordedCall | None:
        """The recorded call if it is a completed step this execution may reuse, else None."""
        call = self.at(position, STEP, name)
        if call is None or call.status != "COMPLETED":
            return None
        if per_attempt and call.attempt != wait_attempt:
            return None
        self.served += 1
        return call

    def completed_wait(
        self, position: int, name: str, wait_attempt: int
    ) -> list[tuple[int, WaitResult]] | None:
        """A wait of this wait attempt whose waitpoints all completed: its results by item."""
        call = self.at(position, WAIT, name)
        if call is None or call.attempt != wait_attempt or not call.complete:
            return None
        if call.results is None:
            return None
        self.served += 1
        return [
            (int(item), WaitResult.from_row(bool(is_error), output, run_id))
            for item, is_error, output, run_id in call.results
        ]


async def run_step(
    waits: WaitService,
    active: ActiveRun,
    position: int,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    per_attempt: bool,
) -> Any:
    """Run ``fn(*args)`` as the step at ``position`` unless a completed record serves it; the
    result goes through JSON both times, so a replay returns exactly what the first run did."""
    replay = await waits.replay_of(active)
    recorded = _reusable(waits, replay, active, position, name, per_attempt)
    if recorded is not None:
        return recorded.result
    started = datetime.now(UTC)
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
        stored = encode_json(value, what=f"step {name!r} result")
    except Exception as error:
        await waits.record_step(active, position, name, started, None, _error_json(error))
        raise
    await waits.record_step(active, position, name, started, stored, None)
    return json.loads(stored)


def run_step_sync(
    ctx: RunContext,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    per_attempt: bool,
) -> Any:
    """``run_step`` from a sync handler's thread: ``fn`` runs here, the statements on the
    worker's loop."""
    waits, active, position = ctx._next_wait()
    replay = anyio.from_thread.run(waits.replay_of, active)
    recorded = _reusable(waits, replay, active, position, name, per_attempt)
    if recorded is not None:
        return recorded.result
    started = datetime.now(UTC)
    try:
        stored = encode_json(fn(*args), what=f"step {name!r} result")
    except Exception as error:
        error_json = _error_json(error)
        anyio.from_thread.run(waits.record_step, active, position, name, started, None, error_json)
        raise
    anyio.from_thread.run(waits.record_step, active, position, name, started, stored, None)
    return json.loads(stored)


def _reusable(
    waits: WaitService,
    replay: Replay | None,
    active: ActiveRun,
    position: int,
    name: str,
    per_attempt: bool,
) -> RecordedCall | None:
    if replay is None:
        return None
    recorded = replay.completed_step(position, name, active.ctx.wait_attempt, per_attempt)
    if recorded is not None:
        waits.step_replayed()
    return recorded


def _error_json(error: BaseException) -> str:
    kind = type(error)
    document = {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(error)}
    return encode_json(document, what="step error")
