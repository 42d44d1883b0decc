"""Typed errors. Each carries what a caller needs to act on it."""

from __future__ import annotations


class FairlaneError(Exception):
    """Base class of every error fairlane raises on purpose."""


class ConfigurationError(FairlaneError):
    """A setting is missing or malformed."""


class PayloadError(FairlaneError):
    """A payload, result or metadata value cannot be stored as PostgreSQL jsonb.

    Nothing was written when this is raised.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        self.index = index
        where = f" (item {index})" if index is not None else ""
        super().__init__(f"{message}{where}")


class TriggerOptionError(FairlaneError):
    """A trigger option is out of range or of the wrong type."""

    def __init__(self, option: str, value: object, reason: str) -> None:
        self.option = option
        self.value = value
        super().__init__(f"{option}={value!r}: {reason}")


class UnknownTaskError(FairlaneError):
    """A worker claimed a run for a task it has no handler for."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"no handler registered for task {task!r}")


class DuplicateTaskError(FairlaneError):
    """Two handlers were registered under one task name."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"task {task!r} is already registered")


class RunNotFoundError(FairlaneError):
    """No run has the given id."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} does not exist")


class LeaseLostError(FairlaneError):
    """The worker no longer holds the run's lease: another worker may own the run now."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        super().__init__(f"lease on run {run_id} was lost")


class MaxDurationExceededError(FairlaneError):
    """A handler ran past the run's max_duration."""


class UnsupportedConnectionError(FairlaneError):
    """``trigger`` was handed a connection type it cannot run statements on."""

    def __init__(self, conn: object) -> None:
        super().__init__(
            f"cannot trigger through {type(conn).__name__}: pass a psycopg Connection or "
            "AsyncConnection, or a SQLAlchemy Session or Connection"
        )
