"""Tasks registered by name with a decorator."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fairlane.errors import DuplicateTaskError, UnknownTaskError
from fairlane.retry import DEFAULT_BACKOFF, Backoff
from fairlane.worker.context import RunContext

AsyncHandler = Callable[[RunContext, Any], Awaitable[Any]]
SyncHandler = Callable[[RunContext, Any], Any]
H = TypeVar("H", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    name: str
    handler: Callable[[RunContext, Any], Any]
    is_async: bool
    backoff: Backoff


class TaskRegistry:
    """Maps task names to handlers. A handler takes ``(ctx, payload)``.

    Async handlers run on the worker's event loop; sync handlers run in worker threads, so a
    blocking call in one does not stall the heartbeats of the others.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition] = {}

    def task(self, name: str | None = None, *, backoff: Backoff | None = None) -> Callable[[H], H]:
        def register(handler: H) -> H:
            self.register(name or handler.__name__, handler, backoff=backoff)
            return handler

        return register

    def register(
        self, name: str, handler: Callable[[RunContext, Any], Any], *,
        backoff: Backoff | None = None,
    ) -> TaskDefinition:  # fmt: skip
        if name in self._tasks:
            raise DuplicateTaskError(name)
        definition = TaskDefinition(
            name=name,
            handler=handler,
            is_async=inspect.iscoroutinefunction(handler),
            backoff=backoff or DEFAULT_BACKOFF,
        )
        self._tasks[name] = definition
        return definition

    def get(self, name: str) -> TaskDefinition:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTaskError(name) from None

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks
