"""Triggering runs: one statement for one run or many, on whatever connection the caller holds.

The statement runs inside the caller's transaction, so a run triggered in a transaction that
rolls back never exists, and one that commits is claimable at once. Every value is encoded and
checked before the statement is sent: a bad item raises a typed error and nothing is written.

Requests without an idempotency key or debounce go through ``insert_runs``, one set-based
statement; the others through ``trigger_keyed_runs``, which decides each of them under locks
taken in one order for the whole call (see ``sql/trigger_keyed.sql`` and
``docs/trigger-options.md``).

An option left at None was not given: a new run takes its documented default, and a trailing
debounce leaves the run's own value alone (``docs/trigger-options.md``, "Debounce").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairlane.durations import MAX_SECONDS, Duration, seconds
from fairlane.errors import PayloadError, TriggerOptionError
from fairlane.payload import encode_json
from fairlane.triggering.checks import BATCH_QUEUE, MAX_ATTEMPTS_CEILING, check_request
from fairlane.triggering.debounce import Debounce, debounce_params
from fairlane.triggering.idempotency import IdempotencyScope, stored_key

__all__ = ["BATCH_QUEUE", "MAX_ATTEMPTS_CEILING", "MAX_SECONDS", "TriggerRequest", "insert_params"]


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """One run to create.

    ``delay`` is seconds, a timedelta, a duration string ("5s", "2h30m") or an aware datetime
    to start at; None starts it at once. ``ttl``, ``max_duration`` and ``idempotency_ttl`` take
    the same duration forms. ``max_attempts``, ``tags``, ``metadata``, ``machine`` and
    ``max_duration`` left at None are not given: a new run gets 3 attempts, no tags, empty
    metadata, no machine and no maximum duration, and a trailing debounce keeps the run's own.
    """

    task: str
    payload: Any = None
    environment: str = "default"
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    delay: Duration | datetime | None = None
    tags: Sequence[str] | None = None
    metadata: Mapping[str, Any] | None = None
    machine: str | None = None
    max_duration: Duration | None = None
    # Time to live while queued; the settings' max_ttl_s fills a missing one and caps it.
    ttl: Duration | None = None
    # The run that triggered this one: scopes idempotency keys, and cancel reaches children.
    parent_run_id: int | None = None
    parent_attempt: int | None = None
    idempotency_key: str | None = None
    idempotency_scope: str = IdempotencyScope.RUN
    # How long the key stays active; None takes the idempotency_key_ttl_s setting (30 days).
    idempotency_ttl: Duration | None = None
    debounce: Debounce | None = None

    @property
    def keyed(self) -> bool:
        """Whether the request needs the keyed (row-locking) trigger path."""
        return self.idempotency_key is not None or self.debounce is not None


def _delay(value: Duration | datetime | None) -> tuple[float | None, datetime | None]:
    """(seconds from the database's now, or an absolute start time)."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise TriggerOptionError("delay", value, "a datetime must carry its time zone")
        return None, value
    return seconds("delay", value), None


def _idempotency(request: TriggerRequest) -> tuple[str | None, float | None]:
    if request.idempotency_key is None:
        return None, None
    key = stored_key(
        request.idempotency_key, request.idempotency_scope,
        parent_run_id=request.parent_run_id, parent_attempt=request.parent_attempt,
    )  # fmt: skip
    return key, seconds("idempotency_ttl", request.idempotency_ttl)


def _row(request: TriggerRequest) -> str:
    """One request as a JSON object: its fields and JSON values, options not given left out."""
    check_request(request)
    delay, delay_until = _delay(request.delay)
    debounce = debounce_params(request.debounce) if request.debounce is not None else None
    if debounce is not None and delay is None and delay_until is None:
        # The seeds' pipeline: the run's first delay is `delay`, else the debounce delay.
        delay = debounce.delay_s
    idempotency_key, idempotency_ttl = _idempotency(request)
    # Named as the columns of trigger_requests (sql/triggering/requests.sql) read them:
    # tests/sql/test_trigger_fields.py holds the two equal.
    values = {
        "environment": request.environment, "queue": request.queue, "task": request.task,
        "priority": request.priority, "max_attempts": request.max_attempts, "delay_s": delay,
        "delay_until": delay_until.isoformat() if delay_until else None,
        "machine": request.machine,
        "max_duration_s": seconds("max_duration", request.max_duration),
        "ttl_s": seconds("ttl", request.ttl), "parent_run_id": request.parent_run_id,
        "idempotency_key": idempotency_key, "idempotency_ttl_s": idempotency_ttl,
        "debounce_key": debounce.key if debounce else None,
        "debounce_delay_s": debounce.delay_s if debounce else None,
        "debounce_trailing": debounce.trailing if debounce else None,
        "debounce_max_delay_s": debounce.max_delay_s if debounce else None,
    }  # fmt: skip
    fields = {name: value for name, value in values.items() if value is not None}
    scalars = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    row = f'{scalars[:-1]},"payload":{encode_json(request.payload)}'
    if request.tags is not None:
        row += f',"tags":{encode_json(list(request.tags), what="tags")}'
    if request.metadata is not None:
        row += f',"metadata":{encode_json(dict(request.metadata), what="metadata")}'
    return row + "}"


def insert_params(requests: Iterable[TriggerRequest]) -> dict[str, str]:
    """The trigger statements' parameter: every request as one JSON array, which PostgreSQL
    reads as a recordset. Raises before anything is sent: a refused request raises
    ``PayloadError`` or ``TriggerOptionError`` carrying its index.
    """
    rows: list[str] = []
    for index, request in enumerate(requests):
        try:
            rows.append(_row(request))
        except PayloadError as error:
            raise PayloadError(str(error), index=index) from None
        except TriggerOptionError as error:
            raise error.at(index) from None
    return {"runs": f"[{','.join(rows)}]"}
