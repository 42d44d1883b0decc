"""The checks every trigger request passes before anything is sent, and the limits they keep.

A value the database would refuse, or fail on, is refused here with a typed error instead,
so that a bad request never reaches the server (where it would abort the caller's
transaction) and never crashes the encoder. The limits are the documented ones
(docs/trigger-options.md, "Limits"):

- names (task, environment, queue, machine): 1 to 128 characters, like graphile-worker's task
  and queue names. Environment, queue and task are columns of btree indexes, whose rows hold
  at most 2704 bytes: with these limits even four-byte characters fit every index, the debounce
  key's (environment, task, key) included;
- tags: at most 10 per run, each 1 to 128 characters, as in the seeds' engine;
- a debounce key: 1 to 256 characters (stored as given, in that index);
- a concurrency key: 1 to 256 characters (stored as given, in runs_queued_key_idx);
- an idempotency key: any non-empty string; only its SHA-256 is stored, so its length never
  reaches an index;
- payload and metadata: at most ``MAX_JSON_DEPTH`` levels of nesting (fairlane.payload).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from fairlane.durations import seconds
from fairlane.errors import TriggerOptionError
from fairlane.triggering.boundary import BATCH_QUEUE, RESERVED_PREFIX, check_names
from fairlane.triggering.idempotency import IdempotencyScope, check_scope

if TYPE_CHECKING:
    from fairlane.triggering.request import TriggerRequest

MAX_NAME_LENGTH = 128
MAX_TAGS = 10
MAX_TAG_LENGTH = 128
MAX_DEBOUNCE_KEY_LENGTH = 256
MAX_CONCURRENCY_KEY_LENGTH = 256
MAX_ATTEMPTS_CEILING = 250
NOT_TAGS = "must be a collection of strings (a list, tuple or set)"
# Priorities are stored as PostgreSQL integers.
MAX_PRIORITY = 2**31 - 1
# Run ids and attempts are PostgreSQL bigints.
MAX_ID = 2**63 - 1
POSITIVE = "must be a positive integer"
# A request's environment when it names none (sql/triggering/requests.sql fills the same name
# in for a request that leaves it out); a handler's child takes its parent's instead.
DEFAULT_ENVIRONMENT = "default"

__all__ = ["BATCH_QUEUE", "DEFAULT_ENVIRONMENT", "check_request", "check_text"]


def check_text(option: str, value: object, most: int | None = None) -> None:
    """A text column value: a non-empty str of at most ``most`` characters, without NUL (which
    PostgreSQL text cannot hold), that encodes to UTF-8 (all psycopg sends)."""
    if not isinstance(value, str) or not value:
        raise TriggerOptionError(option, value, "must be a non-empty string")
    problem = _text_problem(value, most)
    if problem is not None:
        raise TriggerOptionError(option, value, problem)


@lru_cache(maxsize=4096)
def _text_problem(value: str, most: int | None) -> str | None:
    """Why ``value`` cannot be stored, or None. Cached: a bulk trigger names the same few tasks,
    environments and queues over and over."""
    if most is not None and len(value) > most:
        return f"must be at most {most} characters, not {len(value)}"
    if "\x00" in value:
        return "must not contain a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"is not valid Unicode: {error.reason}"
    return None


@lru_cache(maxsize=4096)
def _names_pass(task: str, environment: str, queue: str) -> bool:
    """Whether a request's task, environment and queue are all accepted (cached: a bulk trigger
    names the same few over and over)."""
    return (
        queue != BATCH_QUEUE
        and not task.startswith(RESERVED_PREFIX)
        and all(
            name and _text_problem(name, MAX_NAME_LENGTH) is None
            for name in (task, environment, queue)
        )
    )


def _check_integer(option: str, value: object, low: int, high: int, wanted: str) -> None:
    # bool is an int to Python, never to the database.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TriggerOptionError(option, value, wanted)


def _check_tags(tags: object) -> None:
    """A collection of strings; NUL or bad Unicode inside a tag is left to the JSON encoder,
    which refuses it as a ``PayloadError``."""
    if isinstance(tags, str | bytes | Mapping) or not isinstance(tags, Collection):
        raise TriggerOptionError("tags", tags, NOT_TAGS)
    if len(tags) > MAX_TAGS:
        raise TriggerOptionError("tags", tags, f"must be at most {MAX_TAGS} tags, not {len(tags)}")
    for tag in tags:
        if not isinstance(tag, str):
            raise TriggerOptionError("tags", tags, NOT_TAGS)
        if not 1 <= len(tag) <= MAX_TAG_LENGTH:
            raise TriggerOptionError(
                "tags", tag, f"each tag must be 1 to {MAX_TAG_LENGTH} characters"
            )


def _check_keys(request: TriggerRequest) -> None:
    if request.idempotency_key is not None:
        check_text("idempotency_key", request.idempotency_key)
    if request.concurrency_key is not None:
        check_text("concurrency_key", request.concurrency_key, MAX_CONCURRENCY_KEY_LENGTH)


def check_request(request: TriggerRequest) -> None:
    """Raise ``TriggerOptionError`` naming the first option of ``request`` that is refused."""
    task, environment, queue = request.task, request.environment, request.queue
    if environment is None:
        environment = DEFAULT_ENVIRONMENT
    # Plain strings seen before pass in one cached look; anything else is checked name by name.
    if not (
        type(task) is str
        and type(environment) is str
        and type(queue) is str
        and _names_pass(task, environment, queue)
    ):
        check_text("task", task, MAX_NAME_LENGTH)
        check_text("environment", environment, MAX_NAME_LENGTH)
        check_text("queue", queue, MAX_NAME_LENGTH)
        # The engine's own names (its runs count toward no limit of their environment).
        check_names(task, queue)
    if request.machine is not None:
        check_text("machine", request.machine, MAX_NAME_LENGTH)
    if request.idempotency_key is not None or request.concurrency_key is not None:
        _check_keys(request)
    if request.max_attempts is not None:
        _check_integer(
            "max_attempts",
            request.max_attempts,
            1,
            MAX_ATTEMPTS_CEILING,
            f"must be an integer between 1 and {MAX_ATTEMPTS_CEILING}",
        )
    _check_integer(
        "priority", request.priority, -MAX_PRIORITY, MAX_PRIORITY, "must be a 32-bit integer"
    )
    if request.tags is not None:
        _check_tags(request.tags)
    if request.metadata is not None and not isinstance(request.metadata, Mapping):
        raise TriggerOptionError("metadata", request.metadata, "must be a mapping (a JSON object)")
    # Written out, not looped over by name: most requests give neither, and this runs per run.
    if request.parent_run_id is not None:
        _check_integer("parent_run_id", request.parent_run_id, 1, MAX_ID, POSITIVE)
    if request.parent_attempt is not None:
        _check_integer("parent_attempt", request.parent_attempt, 1, MAX_ID, POSITIVE)
    # The options that refine another are checked whether or not that one is given: a bad
    # value is a mistake even where it would change nothing.
    if request.idempotency_scope is not IdempotencyScope.RUN:
        check_scope(request.idempotency_scope)
    if request.idempotency_ttl is not None:
        seconds("idempotency_ttl", request.idempotency_ttl)
