"""Executing one claimed run and turning how it ended into an outcome for the writer."""

from __future__ import annotations

import logging
import math
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio

from fairlane.errors import MaxDurationExceededError, PayloadError, UnknownTaskError
from fairlane.models import ClaimedRun, RunStatus
from fairlane.payload import encode_json
from fairlane.worker.context import RunContext
from fairlane.worker.lease_store import Completion, Failure, Lease
from fairlane.worker.outcomes import OutcomeWriter
from fairlane.worker.registry import TaskDefinition, TaskRegistry

log = logging.getLogger("fairlane.worker")

STOP_SHUTDOWN = "shutdown"
STOP_LEASE_LOST = "lease_lost"
# The run was cancelled (Client.cancel): it is CANCELED already and its lease token cleared.
STOP_CANCELED = "canceled"


@dataclass(slots=True)
class ActiveRun:
    """A run this worker holds: from claim until its outcome is written or refused."""

    run: ClaimedRun
    lease: Lease
    ctx: RunContext
    # Monotonic time until which the lease is known to hold (last confirmed heartbeat).
    confirmed_until: float
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    handler_done: bool = False
    # Monotonic time the handler returned; whether an outcome went to the writer for it.
    done_at: float = 0.0
    outcome_queued: bool = False
    # Whether the run holds one of the worker's slots (freed when its outcome is written).
    slot_held: bool = False

    # What was left of max_duration when the handler started to wait (waiting does not count).
    paused_budget: float | None = None

    def stop(self, reason: str) -> None:
        """Ask the handler to stop: cancel it if async, signal it if sync."""
        if self.ctx.stop_reason is None:
            self.ctx.stop_reason = reason
        self.ctx.request_stop()
        self.scope.cancel()

    def pause_deadline(self) -> None:
        """The handler waits: stop counting its max_duration until ``resume_deadline``."""
        left = self.scope.deadline - anyio.current_time()
        # A deadline already past is left to fire: the run timed out before it waited.
        if self.paused_budget is None and math.isfinite(left) and left > 0:
            self.paused_budget = left
            self.scope.deadline = math.inf

    def resume_deadline(self) -> None:
        if self.paused_budget is not None:
            self.scope.deadline = anyio.current_time() + self.paused_budget
            self.paused_budget = None


def error_document(error: BaseException, attempt: int, code: str | None = None) -> dict[str, Any]:
    """What is stored in ``runs.error``: type, message, traceback, attempt and an error code."""
    kind = type(error)
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
        "attempt": attempt,
        "code": code,
    }


async def _call(
    definition: TaskDefinition, ctx: RunContext, payload: Any, limiter: anyio.CapacityLimiter
) -> Any:
    if definition.is_async:
        return await definition.handler(ctx, payload)
    call = partial(definition.handler, ctx, payload)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=limiter)


async def execute(
    active: ActiveRun,
    registry: TaskRegistry,
    writer: OutcomeWriter,
    limiter: anyio.CapacityLimiter,
) -> None:
    """Run the handler under the run's own cancel scope and hand its outcome to the writer.

    One scope per run serves both ways a handler is cut short: ``ActiveRun.stop`` cancels it
    (lease lost, shutdown) and ``max_duration`` is its deadline. A run stopped before it
    started is not executed at all.
    """
    run, ctx = active.run, active.ctx
    error: BaseException | None = None
    result: Any = None
    cut_short = True
    if ctx.stop_reason is None:
        scope = active.scope
        if run.max_duration_s is not None:
            scope.deadline = anyio.current_time() + run.max_duration_s
        with scope:
            try:
                result = await _call(registry.get(run.task), ctx, run.payload, limiter)
            except Exception as raised:
                error = raised
        cut_short = scope.cancelled_caught
    active.handler_done = True
    active.done_at = time.monotonic()
    # Every branch below but two hands the writer an outcome.
    active.outcome_queued = ctx.stop_reason not in (STOP_LEASE_LOST, STOP_CANCELED)
    if ctx.stop_reason == STOP_SHUTDOWN and cut_short:
        writer.release(active.lease)
    elif ctx.stop_reason == STOP_LEASE_LOST:
        log.warning("run %s: lease lost, result of attempt %s discarded", run.id, run.attempt)
    elif ctx.stop_reason == STOP_CANCELED:
        # Nothing to write: the cancel ended the run, and the fence would refuse it anyway.
        log.info("run %s: canceled during attempt %s; handler stopped", run.id, run.attempt)
    elif cut_short:
        # Nobody asked for a stop, so the deadline did.
        ctx.request_stop()
        timeout = MaxDurationExceededError(f"run exceeded max_duration of {run.max_duration_s}s")
        writer.fail(_final_failure(active, timeout, RunStatus.TIMED_OUT, "MAX_DURATION_EXCEEDED"))
    elif error is not None:
        writer.fail(_failure(active, error, registry))
    elif result is None:
        writer.complete(Completion(active.lease, "null"))
    else:
        try:
            writer.complete(Completion(active.lease, encode_json(result, what="result")))
        except PayloadError as bad_result:
            writer.fail(_failure(active, bad_result, registry))


def _final_failure(
    active: ActiveRun, error: BaseException, status: RunStatus, code: str | None = None
) -> Failure:
    document = error_document(error, active.run.attempt, code)
    return Failure(active.lease, encode_json(document, what="error"), status.value, None)


def _failure(active: ActiveRun, error: BaseException, registry: TaskRegistry) -> Failure:
    run = active.run
    code = "UNKNOWN_TASK" if isinstance(error, UnknownTaskError) else None
    if run.attempt >= run.max_attempts:
        return _final_failure(active, error, RunStatus.FAILED, code)
    backoff = registry.get(run.task).backoff if run.task in registry else None
    delay = backoff.delay(run.attempt) if backoff else 1.0
    document = error_document(error, run.attempt, code)
    return Failure(active.lease, encode_json(document, what="error"), "DELAYED", delay)
