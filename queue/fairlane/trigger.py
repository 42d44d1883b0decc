"""Triggering runs: one statement for one run or many, on whatever connection the caller holds.

The statement runs inside the caller's transaction, so a run triggered in a transaction that
rolls back never exists, and one that commits is claimable at once. Every value is encoded and
checked before the statement is sent: a bad item raises a typed error and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from math import isfinite
from typing import Any

from fairlane.errors import PayloadError, TriggerOptionError
from fairlane.payload import encode_json

MAX_ATTEMPTS_CEILING = 250
# Longest delay or max_duration accepted (100 years): past it the database's interval and
# timestamp arithmetic overflows, which would abort the caller's transaction.
MAX_SECONDS = 100 * 365 * 86_400


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """One run to create. ``delay`` is seconds or a timedelta; None starts it at once."""

    task: str
    payload: Any = None
    environment: str = "default"
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    delay: float | timedelta | None = None
    tags: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    machine: str | None = None
    max_duration: float | timedelta | None = None
    # Time to live while queued; the settings' max_ttl_s fills a missing one and caps it.
    ttl: float | timedelta | None = None


def _seconds(option: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not (isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        raise TriggerOptionError(
            option, value, f"must be a number of seconds between 0 and {MAX_SECONDS}"
        )
    return seconds


def _check_text(option: str, value: object) -> None:
    """A text column value: PostgreSQL text holds no NUL, and psycopg sends only UTF-8."""
    if not value or not isinstance(value, str):
        raise TriggerOptionError(option, value, "must be a non-empty string")
    if "\x00" in value:
        raise TriggerOptionError(option, value, "must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise TriggerOptionError(option, value, f"is not valid Unicode: {error.reason}") from None


def _check(request: TriggerRequest) -> None:
    for option in ("task", "environment", "queue"):
        _check_text(option, getattr(request, option))
    if request.machine is not None:
        _check_text("machine", request.machine)
    if (
        not isinstance(request.max_attempts, int)
        or not 1 <= request.max_attempts <= MAX_ATTEMPTS_CEILING
    ):
        raise TriggerOptionError(
            "max_attempts", request.max_attempts, f"must be between 1 and {MAX_ATTEMPTS_CEILING}"
        )
    if not isinstance(request.priority, int) or abs(request.priority) > 2**31 - 1:
        raise TriggerOptionError("priority", request.priority, "must be a 32-bit integer")
    if isinstance(request.tags, str) or not all(isinstance(t, str) for t in request.tags):
        raise TriggerOptionError("tags", request.tags, "must be a sequence of strings")


def insert_params(requests: Iterable[TriggerRequest]) -> dict[str, list[Any]]:
    """The array parameters of ``insert_runs``; raises before anything reaches the database."""
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "environments", "queues", "tasks", "payloads", "priorities", "max_attempts",
            "delays", "tags", "metadata", "machines", "max_durations", "ttls",
        )
    }  # fmt: skip
    for index, request in enumerate(requests):
        try:
            _check(request)
            payload = encode_json(request.payload)
            metadata = encode_json(dict(request.metadata), what="metadata")
            delay = _seconds("delay", request.delay)
            max_duration = _seconds("max_duration", request.max_duration)
            ttl = _seconds("ttl", request.ttl)
            tags = encode_json(list(request.tags), what="tags")
        except PayloadError as error:
            raise PayloadError(str(error), index=index) from None
        columns["environments"].append(request.environment)
        columns["queues"].append(request.queue)
        columns["tasks"].append(request.task)
        columns["payloads"].append(payload)
        columns["priorities"].append(request.priority)
        columns["max_attempts"].append(request.max_attempts)
        columns["delays"].append(delay)
        columns["tags"].append(tags)
        columns["metadata"].append(metadata)
        columns["machines"].append(request.machine)
        columns["max_durations"].append(max_duration)
        columns["ttls"].append(ttl)
    return columns
