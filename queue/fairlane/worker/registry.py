"""Tasks registered by name with a decorator, each with its retry policy, defaults and hooks.

``@tasks.task()`` returns a typed handle (``fairlane.worker.handles.Task``) that triggers the
task with its defaults; the worker finds the definition by name.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from fairlane.codecs import Codec, handler_codecs
from fairlane.durations import Duration, seconds
from fairlane.errors import (
    ConfigurationError,
    DuplicateTaskError,
    ReservedNameError,
    TriggerOptionError,
    UnknownTaskError,
)
from fairlane.retry import DEFAULT_BACKOFF, Backoff
from fairlane.worker.context import RunContext

if TYPE_CHECKING:
    from fairlane.worker.handles import Task

AsyncHandler = Callable[[RunContext, Any], Awaitable[Any]]
SyncHandler = Callable[[RunContext, Any], Any]
# on_success(ctx, result) and on_failure(ctx, error); sync or async.
SuccessHook = Callable[[RunContext, Any], Any]
FailureHook = Callable[[RunContext, BaseException], Any]
# A task's concurrency key worked out from a run's payload (as given to the trigger).
KeyOfPayload = Callable[[Any], "str | None"]
ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    name: str
    handler: Callable[[RunContext, Any], Any]
    is_async: bool
    backoff: Backoff
    # A failure is retried (attempts left) when its exception is one of ``retry_on`` (empty:
    # any) and none of ``dont_retry_on``. ``AbortRun`` is never retried.
    retry_on: tuple[type[BaseException], ...] = ()
    dont_retry_on: tuple[type[BaseException], ...] = ()
    # Defaults of a trigger through the task's handle; None: the trigger's own default.
    max_attempts: int | None = None
    max_duration: Duration | None = None
    queue: str | None = None
    priority: int | None = None
    # The runs' concurrency key: a key, or a function of the payload returning one (or None:
    # keyless), called by each trigger through the handle that gives none.
    concurrency_key: str | KeyOfPayload | None = None
    on_success: SuccessHook | None = None
    on_failure: FailureHook | None = None
    # Typed payload and result (a dataclass or pydantic model), else None: plain JSON.
    payload_codec: Codec | None = None
    result_codec: Codec | None = None
    # A schedule the task declares (fairlane.schedules): workers create it when they start.
    cron: str | None = None
    timezone: str | None = None

    def retryable(self, error: BaseException) -> bool:
        """Whether this task's policy retries ``error`` (when attempts are left)."""
        if self.dont_retry_on and isinstance(error, self.dont_retry_on):
            return False
        return not self.retry_on or isinstance(error, self.retry_on)

    def trigger_defaults(self) -> dict[str, Any]:
        """The options a trigger through the handle fills in when not given."""
        defaults = {
            "max_attempts": self.max_attempts,
            "max_duration": self.max_duration,
            "queue": self.queue,
            "priority": self.priority,
            "concurrency_key": (
                self.concurrency_key if isinstance(self.concurrency_key, str) else None
            ),
        }
        return {option: value for option, value in defaults.items() if value is not None}


class TaskDecorator(Protocol):
    """What ``TaskRegistry.task(...)`` returns: applied to a handler, a typed ``Task``."""

    @overload
    def __call__(
        self, handler: Callable[[RunContext, P], Coroutine[Any, Any, R]], /
    ) -> Task[P, R]: ...

    @overload
    def __call__(self, handler: Callable[[RunContext, P], R], /) -> Task[P, R]: ...


def _exception_types(option: str, value: ExceptionTypes | None) -> tuple[type[BaseException], ...]:
    if value is None:
        return ()
    types = value if isinstance(value, tuple) else (value,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise ConfigurationError(f"{option} takes exception classes, not {kind!r}")
    return types


class TaskRegistry:
    """Maps task names to handlers. A handler takes ``(ctx, payload)``.

    Async handlers run on the worker's event loop; sync handlers run in worker threads, so a
    blocking call in one does not stall the heartbeats of the others.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition] = {}

    def task(
        self,
        name: str | None = None,
        *,
        backoff: Backoff | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes | None = None,
        max_attempts: int | None = None,
        max_duration: Duration | None = None,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | KeyOfPayload | None = None,
        on_success: SuccessHook | None = None,
        on_failure: FailureHook | None = None,
        cron: str | None = None,
        timezone: str | None = None,
    ) -> TaskDecorator:
        """Register the decorated handler (under its function's name unless ``name``) and
        return its typed handle, ``Task``. See the README, "Tasks", for every option."""
        # Names of the defining scope (a dataclass local to a function) resolve the handler's
        # annotations under ``from __future__ import annotations``.
        caller = sys._getframe(1)
        namespace = {**caller.f_globals, **caller.f_locals}

        def register(handler: Callable[[RunContext, Any], Any]) -> Task[Any, Any]:
            from fairlane.worker.handles import Task

            definition = self.register(
                name or handler.__name__,
                handler,
                backoff=backoff,
                retry_on=retry_on,
                dont_retry_on=dont_retry_on,
                max_attempts=max_attempts,
                max_duration=max_duration,
                queue=queue,
                priority=priority,
                concurrency_key=concurrency_key,
                on_success=on_success,
                on_failure=on_failure,
                cron=cron,
                timezone=timezone,
                namespace=namespace,
            )
            return Task(definition)

        return register

    def register(
        self,
        name: str,
        handler: Callable[[RunContext, Any], Any],
        *,
        backoff: Backoff | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes | None = None,
        max_attempts: int | None = None,
        max_duration: Duration | None = None,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | KeyOfPayload | None = None,
        on_success: SuccessHook | None = None,
        on_failure: FailureHook | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        namespace: Mapping[str, Any] | None = None,
    ) -> TaskDefinition:
        if name in self._tasks:
            raise DuplicateTaskError(name)
        payload_codec, result_codec = handler_codecs(handler, namespace)
        definition = TaskDefinition(
            name=name,
            handler=handler,
            is_async=inspect.iscoroutinefunction(handler),
            backoff=backoff or DEFAULT_BACKOFF,
            retry_on=_exception_types("retry_on", retry_on),
            dont_retry_on=_exception_types("dont_retry_on", dont_retry_on),
            max_attempts=max_attempts,
            max_duration=max_duration,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
            on_success=on_success,
            on_failure=on_failure,
            payload_codec=payload_codec,
            result_codec=result_codec,
            cron=cron,
            timezone=timezone,
        )
        _check_defaults(definition)
        self._tasks[name] = definition
        return definition

    def get(self, name: str) -> TaskDefinition:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTaskError(name) from None

    def find(self, name: str) -> TaskDefinition | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks


def import_registry(spec: str) -> TaskRegistry:
    """``package.module:attribute`` (attribute default ``tasks``) naming a TaskRegistry."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise ConfigurationError(f"{spec!r} names no module: give package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        # The spec's own module (or a package on its path) is not there: a mistyped spec, or
        # the wrong folder. A module missing inside the user's code keeps its traceback.
        if missing.name is None or not _on_path(missing.name, module_name):
            raise
        raise ConfigurationError(
            f"cannot import {module_name} (from {spec}): no module named {missing.name!r};"
            " run from the project's folder or put it on PYTHONPATH"
        ) from None
    registry = getattr(module, attribute or "tasks", None)
    if not isinstance(registry, TaskRegistry):
        raise ConfigurationError(f"{spec} is not a fairlane TaskRegistry")
    return registry


def _on_path(missing: str, module_name: str) -> bool:
    """Whether ``missing`` is ``module_name`` or one of the packages it is inside."""
    return module_name == missing or module_name.startswith(missing + ".")


def _check_defaults(definition: TaskDefinition) -> None:
    """The trigger defaults are checked when the task is registered, as a trigger checks
    them (``TriggerOptionError``)."""
    from fairlane.triggering.boundary import ENGINE_TASKS, RESERVED_PREFIX
    from fairlane.triggering.checks import check_request
    from fairlane.triggering.request import TriggerRequest

    if definition.name.startswith(RESERVED_PREFIX):
        # The engine's own tasks take no trigger: their runs are made by the engine alone.
        if definition.name not in ENGINE_TASKS:
            raise ReservedNameError(
                "task", definition.name, f'names under "{RESERVED_PREFIX}" are reserved'
            )
        return
    check_request(TriggerRequest(definition.name, None, **definition.trigger_defaults()))
    key = definition.concurrency_key
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TriggerOptionError(
            "concurrency_key", key, "must be a string or a function of the payload"
        )
    seconds("max_duration", definition.max_duration)
    if definition.cron is not None:
        from fairlane.cron.expressions import check_cron

        check_cron(definition.cron, definition.timezone or "UTC")
    elif definition.timezone is not None:
        raise ConfigurationError("timezone is the time zone of a cron schedule: give cron too")
