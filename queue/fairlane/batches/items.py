"""A batch item's trigger request, to and from the options stored with it in ``batch_items``.

An item carries its task and payload apart, and every other trigger option in a JSON object;
the batch decides the environment. A carrier turns the stored item back into its request
(``item_request``); a parent's ``batch_trigger_and_wait`` stores its requests the other way
(``item_options``), so an item it could not trigger at once goes through carriers exactly like
a streamed one.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from fairlane.errors import TriggerOptionError
from fairlane.triggering.debounce import Debounce
from fairlane.triggering.request import TriggerRequest, insert_params

# Options of an item that it may not set: the batch decides them.
_FIXED = {"task", "payload", "environment"}
_OPTIONS = {f.name for f in fields(TriggerRequest)} - _FIXED


def item_request(
    task: str, payload: Any, options: dict[str, Any], environment: str, parent: int | None
) -> TriggerRequest:
    """The trigger request of an item; raises ``TriggerOptionError`` (or TypeError/ValueError
    from a malformed debounce object) on options that can never be valid."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TriggerOptionError("options", sorted(unknown), "unknown trigger options")
    given = dict(options)
    debounce = given.get("debounce")
    if isinstance(debounce, dict):
        given["debounce"] = Debounce(**debounce)
    if isinstance(given.get("tags"), list):
        given["tags"] = tuple(given["tags"])
    if isinstance(given.get("delay"), str):
        given["delay"] = _instant_or_duration(given["delay"])
    if parent is not None:
        given.setdefault("parent_run_id", parent)
    request = TriggerRequest(task, payload, environment=environment, **given)
    insert_params([request])  # the same checks the trigger makes, before anything is sent
    return request


def item_options(request: TriggerRequest) -> dict[str, Any]:
    """The options ``request`` gives, as JSON values ``item_request`` reads back: the ones
    left at their default are left out, durations become seconds and a start time ISO 8601."""
    options: dict[str, Any] = {}
    for field in fields(TriggerRequest):
        if field.name in _FIXED:
            continue
        value = getattr(request, field.name)
        if value is None or value == field.default:
            continue
        options[field.name] = _json_value(value)
    return options


def _json_value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Debounce):
        return {
            "key": value.key,
            "delay": _json_value(value.delay),
            "mode": value.mode,
            "max_delay": _json_value(value.max_delay),
        }
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return value


def _instant_or_duration(text: str) -> datetime | str:
    """A stored delay: an ISO 8601 start time with its time zone, else a duration string."""
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        return text
    return instant if instant.tzinfo is not None else text
