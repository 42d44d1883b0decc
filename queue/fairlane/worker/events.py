"""One log line per run event, with structured fields (``extra=``): run_id, task,
environment, queue, attempt, and where they apply duration_ms, error_type and error (the
first line of its message). ``fairlane --log-format json`` prints them as JSON fields."""

from __future__ import annotations

import logging
from typing import Any

from fairlane.models import ClaimedRun

log = logging.getLogger("fairlane.worker.runs")


def run_event(
    event: str,
    run: ClaimedRun,
    *,
    duration_ms: float | None = None,
    error: BaseException | None = None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """``event``: started, completed, failed, retried, timed_out, lease_lost, canceled,
    released, stale_write_refused."""
    if not log.isEnabledFor(level):
        return
    extra: dict[str, Any] = {
        "event": event,
        "run_id": run.id,
        "task": run.task,
        "environment": run.environment,
        "queue": run.queue,
        "attempt": run.attempt,
        **fields,
    }
    text = f"run {run.id} {event}: {run.task} in {run.environment}/{run.queue}, "
    text += f"attempt {run.attempt}/{run.max_attempts}"
    if duration_ms is not None:
        extra["duration_ms"] = round(duration_ms, 3)
        text += f", {duration_ms:.1f} ms"
    if error is not None:
        first = (str(error).strip().splitlines() or [""])[0][:200]
        extra["error_type"] = type(error).__name__
        extra["error"] = first
        text += f": {type(error).__name__}: {first}"
    log.log(level, text, extra=extra)
