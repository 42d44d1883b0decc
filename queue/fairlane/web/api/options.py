"""Trigger options as JSON: ``{"payload": ..., "options": {...}}`` into ``TriggerRequest``s.

Every option of ``TriggerRequest`` is taken, by its Python name or by the seeds' camelCase
name (``maxAttempts``, ``idempotencyKey``, ``idempotencyKeyTTL``, ``maxDuration``, ...), so a
request written for the seeds' API needs no change of shape. Durations are seconds or strings
("90s", "2h30m"); ``delay`` may also be an ISO 8601 time with its offset. ``queue`` is a name
or ``{"name": ...}``; ``tags`` a string or a list. An unknown option is refused (422) rather
than ignored. The values themselves are checked by the library (``TriggerOptionError``).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from fairlane.triggering.debounce import Debounce
from fairlane.triggering.request import TriggerRequest
from fairlane.web.auth import Caller
from fairlane.web.errors import ApiError

# Option name as sent -> TriggerRequest field.
ALIASES = {
    "environment": "environment",
    "queue": "queue",
    "priority": "priority",
    "max_attempts": "max_attempts",
    "maxAttempts": "max_attempts",
    "delay": "delay",
    "tags": "tags",
    "metadata": "metadata",
    "machine": "machine",
    "max_duration": "max_duration",
    "maxDuration": "max_duration",
    "ttl": "ttl",
    "parent_run_id": "parent_run_id",
    "parentRunId": "parent_run_id",
    "parent_attempt": "parent_attempt",
    "parentAttempt": "parent_attempt",
    "idempotency_key": "idempotency_key",
    "idempotencyKey": "idempotency_key",
    "idempotency_scope": "idempotency_scope",
    "idempotencyKeyScope": "idempotency_scope",
    "idempotency_ttl": "idempotency_ttl",
    "idempotencyKeyTTL": "idempotency_ttl",
    "debounce": "debounce",
    "concurrency_key": "concurrency_key",
    "concurrencyKey": "concurrency_key",
}
DEBOUNCE_ALIASES = {
    "key": "key",
    "delay": "delay",
    "mode": "mode",
    "max_delay": "max_delay",
    "maxDelay": "max_delay",
}
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]")


def _invalid(option: str, reason: str, index: int | None) -> ApiError:
    where = f" (item {index})" if index is not None else ""
    return ApiError(
        422, "TriggerOptionError", f"{option}: {reason}{where}", option=option, index=index
    )


def delay_value(value: Any, index: int | None) -> Any:
    if isinstance(value, str) and _ISO_TIME.match(value):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise _invalid("delay", f"{value!r} is not an ISO 8601 time", index) from None
    return value


def _debounce(value: Any, index: int | None) -> Debounce:
    if not isinstance(value, dict):
        raise _invalid("debounce", 'must be an object {"key", "delay", "mode", "max_delay"}', index)
    fields: dict[str, Any] = {}
    for name, given in value.items():
        field = DEBOUNCE_ALIASES.get(name)
        if field is None:
            raise _invalid(f"debounce.{name}", "unknown debounce option", index)
        fields[field] = given
    if "key" not in fields or "delay" not in fields:
        raise _invalid("debounce", "needs a key and a delay", index)
    return Debounce(**fields)


def _queue(value: Any, index: int | None) -> Any:
    if isinstance(value, dict):
        if set(value) != {"name"}:
            raise _invalid("queue", 'an object queue is {"name": ...}', index)
        return value["name"]
    return value


def _fields(options: Any, index: int | None) -> dict[str, Any]:
    """The options by ``TriggerRequest`` field name."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise _invalid("options", "must be an object", index)
    fields: dict[str, Any] = {}
    for name, value in options.items():
        field = ALIASES.get(name)
        if field is None:
            raise _invalid(name, "unknown trigger option", index)
        if field in fields:
            raise _invalid(name, f"given twice (as {field} too)", index)
        fields[field] = value
    return fields


def trigger_request(
    caller: Caller, task: Any, payload: Any, options: Any, index: int | None = None
) -> TriggerRequest:
    """One request, in the caller's environment (an environment key may name only its own)."""
    if not isinstance(task, str) or not task:
        raise _invalid("task", "must be a non-empty string", index)
    fields = _fields(options, index)
    fields["environment"] = caller.environment(fields.get("environment"))
    if "queue" in fields:
        fields["queue"] = _queue(fields["queue"], index)
    if "delay" in fields:
        fields["delay"] = delay_value(fields["delay"], index)
    if isinstance(fields.get("tags"), str):
        fields["tags"] = [fields["tags"]]
    if fields.get("debounce") is not None:
        fields["debounce"] = _debounce(fields["debounce"], index)
    for name in ("queue", "priority", "idempotency_scope"):
        if name in fields and fields[name] is None:
            del fields[name]  # null: the default
    return TriggerRequest(task, payload, **fields)
