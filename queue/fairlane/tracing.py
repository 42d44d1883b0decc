"""OpenTelemetry traces, when ``opentelemetry-api`` is installed (the ``otel`` extra) and the
application configured a tracer provider; otherwise every function here is a no-op.

A trigger is a ``fairlane.trigger`` PRODUCER span; the W3C trace context of that span is
stored with each run it makes, in its metadata under ``fairlane.traceparent``. A worker runs
the handler inside a ``fairlane.run`` CONSUMER span whose parent is that context, so runs a
handler triggers (children, waits) join the same trace: one trace shows parent, children and
waits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import (
        NoOpTracerProvider,
        ProxyTracerProvider,
        SpanKind,
        Status,
        StatusCode,
    )
except ImportError:  # pragma: no cover - the otel extra is optional
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from fairlane.models import ClaimedRun
    from fairlane.triggering.request import TriggerRequest

TRACE_KEY = "fairlane.traceparent"
TRACER = "fairlane"
# A provider for fairlane's spans only; None: OpenTelemetry's global one.
_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Record fairlane's spans with ``provider`` instead of the global one (None: back to the
    global provider)."""
    global _provider
    _provider = provider


def tracer() -> Any:
    """fairlane's tracer, or None while no provider is configured: without one every span is
    a no-op, and skipping it saves a context switch per run, a share of a no-op run's Python
    time worth saving (bench/sittings/01-where-a-run-s-time-goes.md). Asking costs a lookup in
    the process environment (OpenTelemetry reads ``OTEL_PYTHON_TRACER_PROVIDER`` until a
    provider is set), so a worker asks once per claim, not once per run."""
    if trace is None:
        return None
    provider = _provider or trace.get_tracer_provider()
    if isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider)):
        return None
    return provider.get_tracer(TRACER)


@contextmanager
def trigger_span(requests: Sequence[TriggerRequest]) -> Iterator[Sequence[TriggerRequest]]:
    """The requests to send, carrying the trigger span's trace context when one is recording."""
    recording = tracer()
    if recording is None:
        yield requests
        return
    first = requests[0]
    attributes: dict[str, Any] = {
        "fairlane.task": first.task,
        "fairlane.environment": first.environment or "default",
        "fairlane.queue": first.queue,
        "fairlane.run_count": len(requests),
    }
    with recording.start_as_current_span(
        "fairlane.trigger", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        parent = carrier.get("traceparent")
        if parent is None or not span.is_recording():
            yield requests
            return
        yield [
            replace(request, metadata={**(request.metadata or {}), TRACE_KEY: parent})
            for request in requests
        ]


def record_run_ids(run_ids: Sequence[int]) -> None:
    """On the trigger span: the ids it made (one: ``fairlane.run_id``)."""
    if trace is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        if len(run_ids) == 1:
            span.set_attribute("fairlane.run_id", run_ids[0])
        else:
            span.set_attribute("fairlane.run_ids", list(run_ids))


@contextmanager
def run_span(recording: Any, run: ClaimedRun) -> Iterator[Any]:
    """The handler's span, child of the trigger's, recorded by ``recording`` (a ``tracer()``
    that was not None); yields it."""
    parent = (run.metadata or {}).get(TRACE_KEY)
    context = propagate.extract({"traceparent": parent}) if isinstance(parent, str) else None
    attributes: dict[str, Any] = {
        "fairlane.run_id": run.id,
        "fairlane.task": run.task,
        "fairlane.environment": run.environment,
        "fairlane.queue": run.queue,
        "fairlane.attempt": run.attempt,
    }
    with recording.start_as_current_span(
        "fairlane.run",
        context=context,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield span


def end_run_span(span: Any, status: str, error: BaseException | None = None) -> None:
    """The run's outcome on its span: ``fairlane.status``, and an error status on failure."""
    if span is None or not span.is_recording():
        return
    span.set_attribute("fairlane.status", status)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)))
