"""The tenant boundary of triggering (docs/security.md): a request names only objects of its
own environment, and names under ``fairlane.`` are the engine's.

The rule is enforced once, in SQL: ``check_trigger_request`` (``sql/triggering/requests.sql``)
runs on every request that ``trigger_requests`` reads, so every trigger statement (plain, keyed,
a worker's children, batch items, the HTTP API) passes it, whatever built the request. What can
be told without the database (a reserved task or queue name, a child naming another
environment than its parent's) is refused here first, with the same typed errors, before a
statement is sent. A parent of another environment answers exactly like a parent that does not
exist: ``RunNotFoundError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from fairlane.errors import ForeignEnvironmentError, ReservedNameError, RunNotFoundError

if TYPE_CHECKING:
    from fairlane.triggering.request import TriggerRequest

# Task names the engine keeps for its own tasks: only it registers them, and no request
# triggers them.
RESERVED_PREFIX = "fairlane."
# The batch carrier (fairlane.batches.processing), the one engine task.
BATCH_ITEM_TASK = "fairlane.batch_item"
ENGINE_TASKS = frozenset({BATCH_ITEM_TASK})
# The queue of batch carriers: its runs count toward no limit of their environment.
BATCH_QUEUE = "__batches__"
# check_trigger_request's refusals: a parent run that is not the request's environment's (the
# DETAIL is its id), and a reserved name (the DETAIL is the option).
FOREIGN_PARENT_SQLSTATE = "FLT01"
RESERVED_NAME_SQLSTATE = "FLT02"


def check_names(task: str, queue: str) -> None:
    """Refuse a task under ``fairlane.`` and the queue ``__batches__``: only the engine makes
    runs there (carriers are inserted by ``ingest_batch_items``, never through a request)."""
    if task.startswith(RESERVED_PREFIX):
        raise ReservedNameError("task", task, f'names under "{RESERVED_PREFIX}" are reserved')
    if queue == BATCH_QUEUE:
        raise ReservedNameError("queue", queue, "is reserved for batch processing")


def _sqlstate_and_detail(error: BaseException) -> tuple[str | None, str | None]:
    """The SQLSTATE and DETAIL of a psycopg or psycopg2 error, or of the DBAPI error a
    SQLAlchemy error wraps."""
    original = getattr(error, "orig", None) or error
    state = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
    diag = getattr(original, "diag", None)
    detail = getattr(diag, "message_detail", None) if diag is not None else None
    return state, detail


def refused(error: BaseException) -> Exception | None:
    """The typed error for a database error raised by ``check_trigger_request``, or None."""
    state, detail = _sqlstate_and_detail(error)
    if state == FOREIGN_PARENT_SQLSTATE and detail is not None and detail.isdigit():
        return RunNotFoundError(int(detail))
    if state == RESERVED_NAME_SQLSTATE:
        option = detail or "task"
        return ReservedNameError(option, None, "is reserved for the engine")
    return None


@contextmanager
def boundary_errors() -> Iterator[None]:
    """Raise the boundary's database refusals as their typed errors (sync or async code)."""
    try:
        yield
    except Exception as error:
        typed = refused(error)
        if typed is None:
            raise
        raise typed from error


def in_parent_environment(
    environment: str, requests: Sequence[TriggerRequest]
) -> list[TriggerRequest]:
    """Requests a handler of a run in ``environment`` triggers: each in that environment, the
    parent's. A request that names another raises ``ForeignEnvironmentError`` (with its index
    when there are several): a child never escapes its tenant's limits, fairness and keys."""
    children: list[TriggerRequest] = []
    for index, request in enumerate(requests):
        named = request.environment
        if named is None:
            request = replace(request, environment=environment)
        elif named != environment:
            error = ForeignEnvironmentError(named, environment)
            raise error.at(index) if len(requests) > 1 else error
        children.append(request)
    return children
