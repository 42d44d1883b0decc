"""Executing one claimed run and turning how it ended into an outcome value for the writer."""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import Any

import anyio

from fairlane import tracing
from fairlane.errors import AbortRun, MaxDurationExceededError, PayloadError, UnknownTaskError
from fairlane.models import ClaimedRun, RunStatus
from fairlane.payload import encode_json
from fairlane.worker.context import RunContext
from fairlane.worker.events import run_event
from fairlane.worker.lease_store import Completion, Failure, Lease
from fairlane.worker.outcomes import Attempt
from fairlane.worker.registry import TaskDefinition, TaskRegistry
from fairlane.worker.replay import Suspended
from fairlane.worker.run_state import (
    RUNNING,
    STOP_CANCELED,
    STOP_LEASE_LOST,
    STOP_SHUTDOWN,
    ActiveRun,
)
from fairlane.worker.runs import RunTable

log = logging.getLogger("fairlane.worker")

# The span of a run nobody traces: reusable, as it holds nothing.
_NO_SPAN = nullcontext()
_NO_SHIELD = nullcontext()
# The result of a handler dropped while its run waits without a worker: nothing to write.
_SUSPENDED = object()

# What a run's attempt leaves for the writer: a completion, a failure, or the lease of a run
# handed back (a shutdown cut its handler short).
Outcome = Completion | Failure | Lease


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


async def call_handler(
    definition: TaskDefinition | None, ctx: RunContext, payload: Any, limiter: anyio.CapacityLimiter
) -> Any:
    if definition is None:
        raise UnknownTaskError(ctx.task)
    if definition.is_async:
        return await definition.handler(ctx, payload)
    call = partial(definition.handler, ctx, payload)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=limiter)


async def run_hook(
    hook: Callable[[RunContext, Any], Any] | None,
    ctx: RunContext,
    value: Any,
    limiter: anyio.CapacityLimiter,
) -> None:
    """Run an ``on_success``/``on_failure`` hook before the outcome is written (so a worker
    that dies before writing runs it again with the run: at least once). A hook that raises is
    logged; the run's outcome stands."""
    if hook is None:
        return
    try:
        if inspect.iscoroutinefunction(hook):
            await hook(ctx, value)
        else:
            await anyio.to_thread.run_sync(
                partial(hook, ctx, value), abandon_on_cancel=True, limiter=limiter
            )
    except Exception:
        log.exception("run %s: %s hook of task %s raised", ctx.run_id, hook.__name__, ctx.task)


async def execute(
    active: ActiveRun,
    registry: TaskRegistry,
    runs: RunTable,
    limiter: anyio.CapacityLimiter,
    shared: anyio.CancelScope,
) -> Outcome | None:
    """Run the handler and return its outcome for the writer (None: nothing to write).

    A cancel scope serves both ways a handler is cut short: ``ActiveRun.stop`` cancels it
    (lease lost, shutdown, cancel) and ``max_duration`` is its deadline. Most runs have no
    deadline and no span: they run in ``shared``, the scope their runner keeps open across
    runs until a stop cancels it (entering and leaving a scope per run was about a tenth of a
    no-op run's Python time), and a stop's cancellation leaves through here to the runner,
    which then asks ``interrupted`` for the outcome. The others get a scope of their own. A
    run stopped before it started is not executed at all. A typed payload is decoded (and
    validated) first: one that does not fit fails the run with code INVALID_PAYLOAD and no
    retry.
    """
    run, ctx = active.run, active.ctx
    definition = registry.find(run.task)
    runs.started(active)
    started = active.started_at = time.monotonic()
    if ctx.stop_reason is None:
        run_event("started", run, level=logging.DEBUG)
    span_scope = _NO_SPAN if active.tracer is None else tracing.run_span(active.tracer, run)
    with span_scope as span:
        error, result, cut_short, invalid_payload = await _run_handler(
            active, definition, limiter, shared
        )
        ended = "FAILED" if error is not None else "COMPLETED"
        if result is _SUSPENDED:
            ended = "WAITING"
        tracing.end_run_span(span, ctx.stop_reason or ("TIMED_OUT" if cut_short else ended), error)
    if result is _SUSPENDED:
        # The run let go of this worker (the run table released it): it resumes by a replay.
        run_event("detached", run, level=logging.DEBUG)
        return None
    attempt = runs.returned(active, started, time.monotonic())
    settled, outcome = _stopped(active, attempt, cut_short)
    if settled:
        return outcome
    # A stop came and the handler returned anyway (it caught the cancellation): what is left
    # must not be cancelled by the stop that ended the handler.
    caught_stop = active.scope is shared and shared.cancel_called
    with type(shared)(shield=True) if caught_stop else _NO_SHIELD:
        return await _conclude(
            active,
            definition,
            limiter,
            attempt,
            error,
            result,
            cut_short=cut_short,
            invalid_payload=invalid_payload,
        )


def interrupted(active: ActiveRun, runs: RunTable, shared: anyio.CancelScope) -> Outcome | None:
    """The outcome of a run whose ``execute`` raised: when a stop cut its handler short in the
    runner's shared scope, what the stop decides (the cancellation goes on to the runner's
    scope); else nothing to write."""
    if active.scope is shared and shared.cancel_called and active.state is RUNNING:
        attempt = runs.returned(active, active.started_at, time.monotonic())
        return _stopped(active, attempt, cut_short=True)[1]
    return None


def _stopped(active: ActiveRun, attempt: Attempt, cut_short: bool) -> tuple[bool, Outcome | None]:
    """What a stop decides, if one did: (whether the run is settled by it, its outcome)."""
    reason, run, took = active.ctx.stop_reason, active.run, attempt.seconds * 1000
    if reason == STOP_SHUTDOWN and cut_short:
        run_event("released", run, duration_ms=took)
        return True, active.lease
    if reason == STOP_LEASE_LOST:
        # Its result is discarded: the run was reclaimed or re-claimed meanwhile.
        run_event("lease_lost", run, duration_ms=took, level=logging.WARNING)
        return True, None
    if reason == STOP_CANCELED:
        # Nothing to write: the cancel ended the run, and the fence would refuse it anyway.
        run_event("canceled", run, duration_ms=took)
        return True, None
    return False, None


async def _conclude(
    active: ActiveRun,
    definition: TaskDefinition | None,
    limiter: anyio.CapacityLimiter,
    attempt: Attempt,
    error: BaseException | None,
    result: Any,
    *,
    cut_short: bool,
    invalid_payload: bool,
) -> Outcome:
    """The outcome of a handler no stop settled: a timeout, an error or its result."""
    if cut_short:
        # Nobody asked for a stop, so the deadline did.
        active.ctx.request_stop()
        timeout = MaxDurationExceededError(
            f"run exceeded max_duration of {active.run.max_duration_s}s"
        )
        return await _failed(active, definition, timeout, limiter, attempt, RunStatus.TIMED_OUT)
    if error is not None:
        code = "INVALID_PAYLOAD" if invalid_payload else None
        return await _failed(active, definition, error, limiter, attempt, code=code)
    try:
        stored = encode_result(definition, result)
    except PayloadError as bad_result:
        return await _failed(active, definition, bad_result, limiter, attempt)
    if definition is not None:
        await run_hook(definition.on_success, active.ctx, result, limiter)
    run_event("completed", active.run, duration_ms=attempt.seconds * 1000)
    return Completion(active.lease, stored)


async def _run_handler(
    active: ActiveRun,
    definition: TaskDefinition | None,
    limiter: anyio.CapacityLimiter,
    shared: anyio.CancelScope,
) -> tuple[BaseException | None, Any, bool, bool]:
    """(error, result, cut short, the payload was invalid). In ``shared``, a stop's
    cancellation is not caught here."""
    run = active.run
    if active.ctx.stop_reason is not None:
        return None, None, True, False
    if run.max_duration_s is None and active.tracer is None:
        active.scope = shared
        error, result, invalid_payload = await _call(active, definition, limiter)
        return error, result, False, invalid_payload
    scope = active.scope = type(shared)()
    if run.max_duration_s is not None:
        scope.deadline = anyio.current_time() + run.max_duration_s
    # Cut short, the handler ends with neither a result nor an error.
    called: tuple[BaseException | None, Any, bool] = (None, None, False)
    with scope:
        called = await _call(active, definition, limiter)
    error, result, invalid_payload = called
    return error, result, scope.cancelled_caught, invalid_payload


async def _call(
    active: ActiveRun, definition: TaskDefinition | None, limiter: anyio.CapacityLimiter
) -> tuple[BaseException | None, Any, bool]:
    """(error, result, the payload was invalid). The error is caught here, so its traceback
    ends at this frame, which keeps no reference to it: no cycle for a full collection to
    free."""
    try:
        payload = decode_payload(active.run, definition)
    except PayloadError as invalid:
        return invalid, None, True
    try:
        return None, await call_handler(definition, active.ctx, payload, limiter), False
    except Suspended:
        return None, _SUSPENDED, False
    except Exception as raised:
        return raised, None, False


def decode_payload(run: ClaimedRun, definition: TaskDefinition | None) -> Any:
    if definition is None or definition.payload_codec is None:
        return run.payload
    return definition.payload_codec.decode(run.payload)


def encode_result(definition: TaskDefinition | None, result: Any) -> str:
    if result is None:
        return "null"
    codec = definition.result_codec if definition is not None else None
    if codec is not None:
        result = codec.encode(result)
    return encode_json(result, what="result")


async def _failed(
    active: ActiveRun,
    definition: TaskDefinition | None,
    error: BaseException,
    limiter: anyio.CapacityLimiter,
    attempt: Attempt,
    final: RunStatus | None = None,
    *,
    code: str | None = None,
) -> Failure:
    """The failure for the writer: a retry (DELAYED) while the task's policy allows one and
    attempts are left, else a final status, after the ``on_failure`` hook."""
    if final is not None:
        failure = _final_failure(active, error, final, "MAX_DURATION_EXCEEDED")
    elif code is not None:
        failure = _final_failure(active, error, RunStatus.FAILED, code)
    else:
        failure = _failure(active, error, definition)
    if failure.next_status != "DELAYED" and definition is not None:
        await run_hook(definition.on_failure, active.ctx, error, limiter)
    event = {"DELAYED": "retried", "TIMED_OUT": "timed_out"}.get(failure.next_status, "failed")
    level = logging.INFO if event == "retried" else logging.WARNING
    run_event(event, active.run, duration_ms=attempt.seconds * 1000, error=error, level=level)
    return failure


def _final_failure(
    active: ActiveRun, error: BaseException, status: RunStatus, code: str | None = None
) -> Failure:
    document = error_document(error, active.run.attempt, code)
    return Failure(active.lease, encode_json(document, what="error"), status.value, None)


def failure_decision(
    run: ClaimedRun, error: BaseException, definition: TaskDefinition | None
) -> tuple[RunStatus, str | None, float | None]:
    """How a handler's error ends an attempt: (DELAYED, code, the backoff's delay) for a retry,
    while the task's policy retries the error and attempts are left; else (FAILED, code, None).
    ``AbortRun`` is never retried and stores its own code."""
    if isinstance(error, AbortRun):
        return RunStatus.FAILED, error.code, None
    code = "UNKNOWN_TASK" if isinstance(error, UnknownTaskError) else None
    if run.attempt >= run.max_attempts or (
        definition is not None and not definition.retryable(error)
    ):
        return RunStatus.FAILED, code, None
    delay = definition.backoff.delay(run.attempt) if definition is not None else 1.0
    return RunStatus.DELAYED, code, delay


def _failure(active: ActiveRun, error: BaseException, definition: TaskDefinition | None) -> Failure:
    status, code, delay = failure_decision(active.run, error, definition)
    if status is not RunStatus.DELAYED:
        return _final_failure(active, error, status, code)
    document = error_document(error, active.run.attempt, code)
    return Failure(active.lease, encode_json(document, what="error"), status.value, delay)
