"""Triggering runs: one statement for one run or many, on whatever connection the caller holds.

The statement runs inside the caller's transaction, so a run triggered in a transaction that
rolls back never exists, and one that commits is claimable at once. Every value is encoded and
checked before the statement is sent: a bad item raises a typed error and nothing is written.

Requests without an idempotency key or debounce go through ``insert_runs``, one set-based
statement; the others through ``trigger_keyed_runs``, which decides each of them under locks
taken in one order for the whole call (see ``sql/triggering/keyed.sql`` and
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
from fairlane.frozen import fast_init
from fairlane.payload import MAX_JSON_DEPTH, encode_json, too_deep
from fairlane.triggering.checks import (
    BATCH_QUEUE,
    DEFAULT_ENVIRONMENT,
    MAX_ATTEMPTS_CEILING,
    check_request,
)
from fairlane.triggering.debounce import Debounce, DebounceParams, debounce_params
from fairlane.triggering.idempotency import IdempotencyScope, stored_key

__all__ = [
    "BATCH_QUEUE",
    "DEFAULT_ENVIRONMENT",
    "MAX_ATTEMPTS_CEILING",
    "MAX_SECONDS",
    "TriggerRequest",
    "environment_of",
    "insert_params",
]

# A request's queue when it names none (sql/triggering/requests.sql fills the same name in for
# a request that leaves it out).
DEFAULT_QUEUE = "default"


@fast_init
@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """One run to create.

    ``delay`` is seconds, a timedelta, a duration string ("5s", "2h30m") or an aware datetime
    to start at; None starts it at once. ``ttl``, ``max_duration`` and ``idempotency_ttl`` take
    the same duration forms. ``max_attempts``, ``tags``, ``metadata``, ``machine`` and
    ``max_duration`` left at None are not given: a new run gets 3 attempts, no tags, empty
    metadata, no machine and no maximum duration, and a trailing debounce keeps the run's own.
    ``environment`` left at None is ``"default"``, and for a handler's child its parent's.
    """

    task: str
    payload: Any = None
    environment: str | None = None
    queue: str = DEFAULT_QUEUE
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
    # The run's key inside its queue: the queue's concurrency_limit bounds each key's runs
    # (docs/concurrency.md, "Concurrency keys"); None is the queue's keyless runs.
    concurrency_key: str | None = None

    @property
    def keyed(self) -> bool:
        """Whether the request needs the keyed (row-locking) trigger path."""
        return self.idempotency_key is not None or self.debounce is not None


def environment_of(request: TriggerRequest) -> str:
    """The environment ``request`` triggers in (as named, or the default)."""
    return DEFAULT_ENVIRONMENT if request.environment is None else request.environment


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
        request.idempotency_key,
        request.idempotency_scope,
        parent_run_id=request.parent_run_id,
        parent_attempt=request.parent_attempt,
    )
    return key, seconds("idempotency_ttl", request.idempotency_ttl)


def _fields(request: TriggerRequest) -> dict[str, Any]:
    """One request's checked fields, named as the columns of trigger_requests
    (sql/triggering/requests.sql) read them, options not given left out; its JSON values
    (payload, tags, metadata) as given, still to be encoded. tests/sql/test_trigger_fields.py
    holds the names equal. Options are checked in the order they are read here, so the first
    refused one is the one named; a bulk trigger's requests mostly give none, and an option
    not given costs one comparison."""
    check_request(request)
    # A value left at its default is not sent: trigger_requests fills it in (a bulk trigger's
    # JSON is a fifth of the size, and the server parses and the client encodes that much less).
    fields: dict[str, Any] = {"task": request.task}
    if request.environment is not None and request.environment != DEFAULT_ENVIRONMENT:
        fields["environment"] = request.environment
    if request.queue != DEFAULT_QUEUE:
        fields["queue"] = request.queue
    if request.priority != 0:
        fields["priority"] = request.priority
    debounce = _add_start(request, fields)
    _add_run_options(request, fields)
    if request.idempotency_key is not None:
        fields["idempotency_key"], idempotency_ttl = _idempotency(request)
        if idempotency_ttl is not None:
            fields["idempotency_ttl_s"] = idempotency_ttl
    if debounce is not None:
        fields.update(
            debounce_key=debounce.key,
            debounce_delay_s=debounce.delay_s,
            debounce_trailing=debounce.trailing,
        )
        if debounce.max_delay_s is not None:
            fields["debounce_max_delay_s"] = debounce.max_delay_s
    return fields


def _add_start(request: TriggerRequest, fields: dict[str, Any]) -> DebounceParams | None:
    """The request's delay or start time, checked, into its fields; its debounce, if any."""
    if request.delay is None and request.debounce is None:
        # Most requests start at once: nothing to work out.
        return None
    delay, delay_until, debounce = _start(request)
    if delay is not None:
        fields["delay_s"] = delay
    if delay_until is not None:
        fields["delay_until"] = delay_until.isoformat()
    return debounce


def _start(request: TriggerRequest) -> tuple[float | None, datetime | None, DebounceParams | None]:
    """(delay in seconds, start time, debounce) of a request, checked."""
    delay: float | None = None
    delay_until: datetime | None = None
    if request.delay is not None:
        delay, delay_until = _delay(request.delay)
    debounce = debounce_params(request.debounce) if request.debounce is not None else None
    if debounce is not None and delay is None and delay_until is None:
        # The seeds' pipeline: the run's first delay is `delay`, else the debounce delay.
        delay = debounce.delay_s
    return delay, delay_until, debounce


def _add_run_options(request: TriggerRequest, fields: dict[str, Any]) -> None:
    """The run's own options that were given, checked."""
    if request.max_attempts is not None:
        fields["max_attempts"] = request.max_attempts
    if request.machine is not None:
        fields["machine"] = request.machine
    if request.max_duration is not None:
        fields["max_duration_s"] = seconds("max_duration", request.max_duration)
    if request.ttl is not None:
        fields["ttl_s"] = seconds("ttl", request.ttl)
    if request.parent_run_id is not None:
        fields["parent_run_id"] = request.parent_run_id
    if request.concurrency_key is not None:
        fields["concurrency_key"] = request.concurrency_key


# The JSON values of a request's object, after its scalar fields.
_JSON_KEYS = ("payload", "tags", "metadata")


def _add_json_values(request: TriggerRequest, row: dict[str, Any]) -> None:
    """Add the request's JSON values to its row, checked for depth (the one check the fast
    path below cannot make on the encoded array)."""
    if request.payload is not None:
        row["payload"] = _shallow("payload", request.payload)
    if request.tags is not None:
        row["tags"] = _shallow("tags", list(request.tags))
    if request.metadata is not None:
        row["metadata"] = _shallow("metadata", dict(request.metadata))


def _shallow(what: str, value: Any) -> Any:
    if too_deep(value):
        raise PayloadError(f"{what} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")
    return value


def _row_text(request: TriggerRequest, fields: dict[str, Any]) -> str:
    """One request as a JSON object, each JSON value encoded and checked on its own, so that a
    refused one is named exactly."""
    row = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))[:-1]
    if request.payload is not None:
        row += f',"payload":{encode_json(request.payload)}'
    if request.tags is not None:
        row += f',"tags":{encode_json(list(request.tags), what="tags")}'
    if request.metadata is not None:
        row += f',"metadata":{encode_json(dict(request.metadata), what="metadata")}'
    return row + "}"


def insert_params(requests: Iterable[TriggerRequest]) -> dict[str, str]:
    """The trigger statements' parameter: every request as one JSON array, which PostgreSQL
    reads as a recordset. Raises before anything is sent: a refused request raises
    ``PayloadError`` or ``TriggerOptionError`` carrying its index.

    The array is encoded in one call of the JSON encoder (most of a bulk trigger's time was
    spent encoding each request on its own). Whatever that call or the checks after it refuse
    (a value that is not JSON, a NUL, text that is not Unicode) sends the requests through the
    encoding of each value on its own, which names the request and the value.
    """
    listed = list(requests)
    rows: list[dict[str, Any]] = []
    for index, request in enumerate(listed):
        try:
            row = _fields(request)
            _add_json_values(request, row)
        except PayloadError as error:
            raise PayloadError(str(error), index=index) from None
        except TriggerOptionError as error:
            raise error.at(index) from None
        rows.append(row)
    try:
        text = json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        if "\\u0000" in text:
            raise ValueError("a NUL escape, or an escaped backslash before u0000")
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        scalars = [{k: v for k, v in row.items() if k not in _JSON_KEYS} for row in rows]
        return {"runs": _each_on_its_own(listed, scalars)}
    return {"runs": text}


def _each_on_its_own(requests: list[TriggerRequest], fields: list[dict[str, Any]]) -> str:
    texts: list[str] = []
    for index, (request, checked) in enumerate(zip(requests, fields, strict=True)):
        try:
            texts.append(_row_text(request, checked))
        except PayloadError as error:
            raise PayloadError(str(error), index=index) from None
    return f"[{','.join(texts)}]"
