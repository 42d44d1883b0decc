"""``fairlane runs show`` as a person reads it: the run's state first, then when, its payload,
result or error, every kept attempt's error, and what a waiting run waits on. ``--json`` prints
the whole document instead."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from fairlane.models import Run, RunStep, WaitsOn

# Long values (a payload, a result) are cut to this many lines; --json shows them whole.
_MOST_LINES = 20


def render(run: Run, waits: Sequence[WaitsOn] = (), steps: Sequence[RunStep] = ()) -> str:
    width = max(shutil.get_terminal_size((100, 24)).columns, 40)
    lines = [*_lines(run, waits, width), *_steps(steps, width)]
    return "\n".join(lines) + "\n"


def _steps(steps: Sequence[RunStep], width: int) -> Iterator[str]:
    """The recorded steps and waits (docs/durable-execution.md), one line each."""
    if not steps:
        return
    yield "steps and waits (by call position)"
    for step in steps:
        took = ""
        if step.finished_at is not None:
            took = f"  {(step.finished_at - step.started_at).total_seconds():.3f}s"
        outcome = ""
        if step.error is not None:
            outcome = f"  {_error_line(step.error)}"
        elif step.status == "COMPLETED":
            outcome = "  " + json.dumps(step.result, default=str, ensure_ascii=False)
        yield _cut(
            f"  {step.position:>3} {step.kind.lower():<4} {step.name}  {step.status.lower()}"
            f"  attempt {step.attempt}  {_moment(step.started_at)}{took}{outcome}",
            width,
        )


def _lines(run: Run, waits: Sequence[WaitsOn], width: int) -> Iterator[str]:
    yield f"run {run.id}  {run.task}  {run.status}"
    yield from _fields(
        ("environment", run.environment),
        ("queue", run.queue),
        ("priority", run.priority),
        ("attempts", f"{run.attempts} of {run.max_attempts}"),
        ("tags", ", ".join(run.tags) or None),
        ("machine", run.machine),
        ("parent run", run.parent_run_id),
        ("worker", run.worker_id),
        ("lease until", _moment(run.lease_until)),
        ("idempotency key", _key(run)),
        ("created", _moment(run.created_at)),
        ("available at", _moment(run.available_at)),
        ("started", _moment(run.started_at)),
        ("finished", _moment(run.finished_at)),
        ("duration", _duration(run)),
        ("max duration", None if run.max_duration_s is None else f"{run.max_duration_s:g}s"),
    )
    yield from _block("payload", run.payload, width)
    if run.result is not None:
        yield from _block("result", run.result, width)
    if run.metadata:
        yield from _block("metadata", run.metadata, width)
    if run.attempt_errors or run.earlier_attempt_errors:
        yield "attempt errors (oldest first)"
        if run.earlier_attempt_errors:
            yield f"  {run.earlier_attempt_errors} earlier failed attempt(s), not kept"
        for failed in run.attempt_errors:
            yield _cut(
                f"  attempt {failed.attempt}  {_moment(failed.failed_at)}  "
                f"{_error_line(failed.error)}",
                width,
            )
    elif run.error:
        yield _cut(f"error  {_error_line(run.error)}", width)
    if waits:
        yield "waits on"
        for wait in waits:
            yield _cut(f"  position {wait.position}  {_wait(wait)}", width)


def _fields(*pairs: tuple[str, Any]) -> Iterator[str]:
    for name, value in pairs:
        if value is not None:
            yield f"  {name:<16} {value}"


def _block(title: str, value: Any, width: int) -> Iterator[str]:
    text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
    lines = text.splitlines()
    yield title
    for line in lines[:_MOST_LINES]:
        yield _cut(f"  {line}", width)
    if len(lines) > _MOST_LINES:
        yield f"  ... {len(lines) - _MOST_LINES} more lines (--json shows all)"


def _error_line(error: dict[str, Any]) -> str:
    code = error.get("code") or error.get("type") or ""
    message = str(error.get("message") or "").strip()
    first = message.splitlines()[0] if message else ""
    return f"{code}: {first}" if code and first else str(code or first or error)


def _wait(wait: WaitsOn) -> str:
    target = {
        "RUN": f"run {wait.run_id}",
        "BATCH": f"batch {wait.batch_id}",
        "DATETIME": f"until {_moment(wait.complete_after)}",
        "MANUAL": f"token {wait.waitpoint_id}",
    }.get(wait.kind, f"{wait.kind} {wait.waitpoint_id}")
    timeout = f", times out {_moment(wait.timeout_at)}" if wait.timeout_at else ""
    return f"{target} ({wait.status.lower()}{timeout})"


def _key(run: Run) -> str | None:
    if run.idempotency_key is None:
        return None
    expires = run.idempotency_key_expires_at
    return f"held, until {_moment(expires)}" if expires else "held"


def _duration(run: Run) -> str | None:
    if run.started_at is None or run.finished_at is None:
        return None
    return f"{(run.finished_at - run.started_at).total_seconds():.3f}s (last attempt)"


def _moment(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
