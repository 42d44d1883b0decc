"""Typed errors. Each carries what a caller needs to act on it.

Every error is a ``FairlaneError`` under exactly one category base, which says what kind of
failure it is: ``InputError``, ``NotFoundError``, ``ConflictError``, ``LimitExceededError``,
``TimedOutError``, ``UnavailableError``, ``SchemaError`` or ``RunError``. Catch a category
to handle every error of its kind; the CLI's exit code and the HTTP API's status of an error
are its category's (``fairlane.errors_policy``).
"""

from __future__ import annotations


class FairlaneError(Exception):
    """Base class of every error fairlane raises on purpose."""


class InputError(FairlaneError):
    """What the caller gave is wrong: a value out of range or of the wrong type, a malformed
    setting, a call fairlane cannot serve as made. Nothing was changed."""


class NotFoundError(FairlaneError):
    """What the caller named (a run, batch, waitpoint, schedule, job, key) does not exist."""


class ConflictError(FairlaneError):
    """What was asked cannot be done in the state the named thing is in (a run that is not
    DELAYED rescheduled, an aborted batch given items). Nothing was changed."""


class LimitExceededError(FairlaneError):
    """A limit refused the call (a queue's size limit, a batch token bucket): it may succeed
    later, once there is room. Nothing was written."""


class TimedOutError(FairlaneError):
    """Something the call waited for did not come in time (a run to end, a stream's next
    line)."""


class UnavailableError(FairlaneError):
    """The database could not be reached or did not answer in time."""


class SchemaError(FairlaneError):
    """The database's schema, or the package's SQL, is not what this fairlane needs."""


class RunError(FairlaneError):
    """About a run's execution, raised in or around its handler: aborted, its lease lost,
    over its max duration, a child run that did not complete."""


# The category bases, most general first; each error class inherits exactly one of them.
CATEGORIES: tuple[type[FairlaneError], ...] = (
    InputError,
    NotFoundError,
    ConflictError,
    LimitExceededError,
    TimedOutError,
    UnavailableError,
    SchemaError,
    RunError,
)


def _shown(value: object, most: int = 80) -> str:
    """``repr(value)``, cut short when long: a refused 1 MB key must not make a 1 MB message."""
    text = repr(value)
    if len(text) <= most:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[: most - 3]}...{size}"


class ConfigurationError(InputError):
    """A setting is missing or malformed."""


class UnsupportedServerError(ConfigurationError):
    """The PostgreSQL server is older than the oldest version fairlane supports."""

    def __init__(self, found: str, needed: str) -> None:
        self.found = found
        self.needed = needed
        super().__init__(f"PostgreSQL {found} is not supported: fairlane needs PostgreSQL {needed}")


class DatabaseUnavailable(UnavailableError):
    """The database could not be reached or stopped answering: no connection within the
    connect timeout, a connection lost during a call, or no answer in time
    (``DatabaseTimeout``). The psycopg error, when there is one, is the ``__cause__``.

    ``sent`` says whether the call had sent a statement: False, nothing reached the server
    and the call can be repeated as it is; True, it may or may not have been applied.
    """

    def __init__(self, message: str, *, sent: bool = False) -> None:
        self.sent = sent
        super().__init__(message)


class DatabaseTimeout(DatabaseUnavailable):
    """A statement did not finish in time: the server cancelled it (``statement_timeout``,
    ``lock_timeout``), or it did not answer within the statement timeout and the connection
    was abandoned (a hung server or network)."""


class SettingError(ConfigurationError):
    """A limit, scheduler knob, batch limit or maintenance setting was given a value out of
    its range; nothing was changed. ``setting`` names it, ``value`` is the value as given."""

    def __init__(self, setting: str, value: object, reason: str) -> None:
        self.setting = setting
        self.value = value
        self.reason = reason
        super().__init__(f"{setting}={_shown(value)}: {reason}")


class UnknownMaintenanceItemError(NotFoundError):
    """No periodic job or setting has that name (``kind``: "periodic job" or "setting")."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"no {kind} named {name!r}")


class RunFilterError(InputError, ValueError):
    """A run filter names something that cannot be (an unknown status, tags given as one
    string); nothing was read."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field}={_shown(value)}: {reason}")


class ListLimitError(InputError, ValueError):
    """A list's ``limit`` is not a whole number of at least 1; nothing was read."""

    def __init__(self, value: object) -> None:
        self.value = value
        super().__init__(f"limit={_shown(value)}: must be a whole number >= 1")


class PayloadError(InputError):
    """A payload, result or metadata value cannot be stored as PostgreSQL jsonb.

    Nothing was written when this is raised.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        self.index = index
        where = f" (item {index})" if index is not None else ""
        super().__init__(f"{message}{where}")


class TriggerOptionError(InputError):
    """A trigger option is out of range or of the wrong type.

    ``index`` is the position of the offending request in a bulk trigger (0 for a single one),
    or None when the option did not come from a trigger request. ``value`` is the value as
    given; the message shows it cut short when it is long.
    """

    def __init__(
        self, option: str, value: object, reason: str, *, index: int | None = None
    ) -> None:
        self.option = option
        self.value = value
        self.reason = reason
        self.index = index
        where = f" (item {index})" if index is not None else ""
        super().__init__(f"{option}={_shown(value)}: {reason}{where}")

    def at(self, index: int) -> TriggerOptionError:
        """The same error, naming the bulk item it came from."""
        # Built without __init__, so subclasses with other signatures keep their type.
        located = type(self).__new__(type(self))
        located.__dict__.update(self.__dict__)
        located.index = index
        located.args = (f"{self.option}={_shown(self.value)}: {self.reason} (item {index})",)
        return located


class ReservedNameError(TriggerOptionError):
    """A trigger named a task under ``fairlane.`` or the queue ``__batches__``: both are the
    engine's own (docs/security.md). Nothing was written."""


class ForeignEnvironmentError(TriggerOptionError):
    """A handler's child named another environment than its parent's: children always run in
    their parent's environment, under its limits, fairness and keys (docs/security.md).
    ``value`` is the environment named; nothing was written."""

    def __init__(self, environment: object, parent_environment: str) -> None:
        self.parent_environment = parent_environment
        reason = f"a child runs in its parent's environment ({parent_environment!r})"
        super().__init__("environment", environment, reason)


class InvalidDurationError(TriggerOptionError):
    """A duration (delay, ttl, max_duration, debounce delay, ...) could not be understood.

    ``value`` is the bad value exactly as it was given.
    """

    def __init__(self, option: str, value: object, *, index: int | None = None) -> None:
        reason = (
            "is not a duration: give seconds, a timedelta, or a string such as "
            "'500ms', '5s', '1m', '2h30m', '1d' or '1w'"
        )
        super().__init__(option, value, reason, index=index)


class QueueSizeLimitExceeded(LimitExceededError):
    """A trigger would take a queue or environment past its size limit; nothing was written.

    ``scope`` says which limit was hit ("queue" or "environment"); ``size`` is how many runs
    were already QUEUED or DELAYED there (counted up to limit + 1); ``index`` is the first
    request of the trigger that did not fit.
    """

    def __init__(
        self, environment: str, queue: str, limit: int, *, scope: str, size: int, index: int
    ) -> None:
        self.environment = environment
        self.queue = queue
        self.limit = limit
        self.scope = scope
        self.size = size
        self.index = index
        target = f"queue {queue!r} of environment {environment!r}"
        if scope == "environment":
            target = f"environment {environment!r} (queue {queue!r})"
        super().__init__(
            f"{target} is full: {size} runs queued or delayed, size limit {limit} (item {index})"
        )


class RunStateError(ConflictError):
    """An operation needs the run in another state than the one it is in."""

    def __init__(self, run_id: int, status: str, wanted: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id} is {status}: {wanted}")


class RunNotDelayedError(RunStateError):
    """Only a DELAYED run can be rescheduled."""

    def __init__(self, run_id: int, status: str) -> None:
        super().__init__(run_id, status, "only a DELAYED run can be rescheduled")


class RunNotRetryableError(RunStateError):
    """Only a run that ended FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE is retried."""

    def __init__(self, run_id: int, status: str) -> None:
        super().__init__(
            run_id,
            status,
            "only a FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE run can be retried",
        )


class UnknownTaskError(InputError):
    """A worker claimed a run for a task it has no handler for."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"no handler registered for task {task!r}")


class UnservedTaskError(InputError):
    """``fairlane trigger --strict`` refused a task that no live worker serves where the run
    would go (a typo, or a task not deployed yet). Nothing was written."""

    def __init__(self, task: str, why: str) -> None:
        self.task = task
        super().__init__(why)


class DuplicateTaskError(InputError):
    """Two handlers were registered under one task name."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"task {task!r} is already registered")


class RunNotFoundError(NotFoundError):
    """No run has the given id."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} does not exist")


class WaitpointNotFoundError(NotFoundError):
    """A wait named a waitpoint (a token, a batch's) that does not exist, or no longer does:
    tokens are pruned after the retention once completed."""

    def __init__(self, waitpoint_id: int) -> None:
        self.waitpoint_id = waitpoint_id
        super().__init__(f"waitpoint {waitpoint_id} does not exist")


class LeaseLostError(RunError):
    """The worker no longer holds the run's lease: another worker may own the run now."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        super().__init__(f"lease on run {run_id} was lost")


class MaxDurationExceededError(RunError):
    """A handler ran past the run's max_duration."""


class AbortRun(RunError):
    """Raised by a handler to fail its run now: the run ends ``FAILED`` whatever attempts are
    left, with no retry. ``code`` is stored as the error's code (default ``ABORTED``)."""

    def __init__(self, message: str = "run aborted", *, code: str = "ABORTED") -> None:
        self.code = code
        super().__init__(message)


class ReplayMismatchError(AbortRun):
    """A replayed handler asked, at a call position, for something other than what its run
    recorded there (another step or wait, another name, or in another order): the handler is
    not deterministic, and the recorded result must not be handed to a different call. The run
    fails at once, with code ``REPLAY_MISMATCH`` (a retry would meet the same record)."""

    def __init__(
        self, run_id: int, position: int, recorded: tuple[str, str], asked: tuple[str, str]
    ) -> None:
        self.run_id, self.position, self.recorded, self.asked = run_id, position, recorded, asked
        super().__init__(
            f"run {run_id} replayed a different call at position {position}: recorded "
            f"{recorded[0].lower()} {recorded[1]!r}, asked for {asked[0].lower()} {asked[1]!r}",
            code="REPLAY_MISMATCH",
        )


class MetadataRemovalError(InputError, TypeError):
    """A handler tried to remove a key of ``ctx.metadata`` (``del``, ``pop``, ``clear``). A run's
    metadata is merged, never pruned: set the key to None instead."""

    def __init__(self, key: object = None) -> None:
        self.key = key
        which = f"key {_shown(key)}" if key is not None else "keys"
        super().__init__(
            f"a run's metadata keeps its {which}: set a key to None instead of removing it"
        )


class EagerModeError(InputError):
    """Eager mode (``fairlane.testing.eager``) does not simulate what was asked: debounce, a
    wait for a token or a batch, a wait on a run that has not finished or that is not an eager
    run. Test it against a database and a worker instead (the ``fairlane.testing`` fixtures)."""


class RunFailedError(RunError):
    """A run waited on through a task handle (``await task.trigger_and_wait(ctx, ...)``) did
    not complete. ``status`` is its final status (FAILED, CRASHED, TIMED_OUT, EXPIRED,
    CANCELED, SYSTEM_FAILURE) and ``error`` its stored error."""

    def __init__(self, run_id: int | None, status: str, error: dict[str, object] | None) -> None:
        self.run_id = run_id
        self.status = status
        self.error = error
        message = (error or {}).get("message") or ""
        super().__init__(f"run {run_id} ended {status}" + (f": {message}" if message else ""))


class ScheduleNotFoundError(NotFoundError):
    """No schedule has that external id in that environment."""

    def __init__(self, environment: str, key: str) -> None:
        self.environment = environment
        self.key = key
        super().__init__(f"no schedule {key!r} in environment {environment!r}")


class RunWaitTimeoutError(TimedOutError, TimeoutError):
    """``wait_for_run`` gave up: the run was not final within ``timeout`` seconds. ``status``
    is the last status read."""

    def __init__(self, run_id: int, timeout: float, status: str) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.status = status
        super().__init__(f"run {run_id} is still {status} after {timeout:g}s")


class UnsupportedConnectionError(InputError):
    """``trigger`` was handed a connection type it cannot run statements on."""

    def __init__(self, conn: object) -> None:
        super().__init__(
            f"cannot trigger through {type(conn).__name__}: pass a psycopg Connection or "
            "AsyncConnection, or a SQLAlchemy Session or Connection"
        )


class BatchError(FairlaneError):
    """A batch operation was refused; nothing was written by the refused call."""


class BatchRateLimitedError(BatchError, LimitExceededError):
    """The environment's batch token bucket holds fewer tokens than the batch's run count.

    ``retry_after_s`` is how long until it will (None: never, the run count is above the
    bucket's maximum or the bucket does not refill).
    """

    def __init__(self, environment: str, run_count: int, retry_after_s: float | None) -> None:
        self.environment = environment
        self.run_count = run_count
        self.retry_after_s = retry_after_s
        when = f"retry in {retry_after_s:.2f}s" if retry_after_s is not None else "never fits"
        super().__init__(
            f"batch of {run_count} items refused for environment {environment!r}: "
            f"token bucket exhausted ({when})"
        )


class BatchItemNotTriggered(BatchError, RunError):
    """A batch item could not become a run on this attempt; its carrier retries it."""


class BatchWithoutWaitpointError(BatchError, InputError):
    """A handler waited on a batch created without ``parent_run_id``: nothing completes for
    it to wait on."""

    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(f"batch {batch_id} has no waitpoint: create it with parent_run_id")


class BatchTooLargeError(BatchError, InputError):
    """A batch's run count is outside 1..batch_max_items."""

    def __init__(self, run_count: int, max_items: int) -> None:
        self.run_count = run_count
        self.max_items = max_items
        super().__init__(f"a batch holds 1 to {max_items} items, not {run_count}")


class BatchNotFoundError(BatchError, NotFoundError):
    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(f"batch {batch_id} does not exist")


class BatchAbortedError(BatchError, ConflictError):
    """The batch was aborted (not sealed within its seal timeout): it takes no more items."""

    def __init__(self, batch_id: int, reason: str | None = None) -> None:
        self.batch_id = batch_id
        super().__init__(f"batch {batch_id} is ABORTED" + (f": {reason}" if reason else ""))


class BatchIndexError(BatchError, InputError):
    """An item's index is at or past the batch's run count. Items before it were kept."""

    def __init__(self, batch_id: int, line: int, index: int, run_count: int) -> None:
        self.batch_id = batch_id
        self.line = line
        self.index = index
        self.run_count = run_count
        super().__init__(
            f"batch {batch_id} line {line}: item index {index} is outside 0..{run_count - 1}"
        )


class BatchLineError(BatchError, InputError):
    """A batch line is not valid UTF-8, not JSON, or not an item object."""

    def __init__(self, line: int, index: int, reason: str) -> None:
        self.line = line
        self.index = index
        self.reason = reason
        super().__init__(f"batch line {line} (item {index}): {reason}")


class BatchStreamIdleError(BatchError, TimedOutError):
    """An item stream sent nothing for ``idle_timeout_s`` seconds, so its ingest was ended.

    The complete lines that came before were stored: ``accepted`` new items of this call,
    ``received`` items in the batch overall; a partial last line was dropped. The batch stays
    open: resend the rest with ``first_index=index`` (the index the next item would have had).
    """

    def __init__(
        self, batch_id: int, idle_timeout_s: float, *, accepted: int, received: int, index: int
    ) -> None:
        self.batch_id = batch_id
        self.idle_timeout_s = idle_timeout_s
        self.accepted = accepted
        self.received = received
        self.index = index
        super().__init__(
            f"batch {batch_id}: the item stream sent nothing for {idle_timeout_s:g}s and was "
            f"ended; {accepted} items of it were stored ({received} in the batch), resend the "
            f"rest with first_index={index}"
        )


class BatchTransactionError(BatchError, InputError):
    """Ingest was handed a connection inside a transaction. Each slice of items commits on its
    own (so a slice never holds its batch while the next one's items are inserted): pass a
    connection outside a transaction, best an autocommit one. Nothing was sent."""

    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(
            f"batch {batch_id}: items are ingested outside a transaction, each slice "
            "committed on its own; the connection is inside one"
        )


class BatchOffsetError(BatchError, InputError):
    """An ingest's ``first_index`` (the index of its first item without one) is not a
    non-negative integer. Nothing was sent."""

    def __init__(self, first_index: object) -> None:
        self.first_index = first_index
        super().__init__(f"first_index must be a non-negative integer, not {first_index!r}")


class SchemaObjectError(SchemaError):
    """A function, trigger or view of ``sql/`` cannot be installed as written."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"SQL object {name}: {reason}")


class SchemaLockTimeoutError(SchemaError):
    """The install step could not take the table locks it needs (another transaction held
    them each time it tried); nothing of it was kept. Run ``fairlane migrate`` again."""

    def __init__(self, schema: str, attempts: int, lock_timeout_s: float) -> None:
        self.schema = schema
        self.attempts = attempts
        self.lock_timeout_s = lock_timeout_s
        super().__init__(
            f"schema {schema}: could not take a table lock within {lock_timeout_s:g} s in "
            f"{attempts} attempts (a long transaction holds it); run `fairlane migrate` again"
        )


class IndexBuildError(SchemaError):
    """A revision's concurrent index build did not leave a valid index (or cannot be named)."""

    def __init__(self, index: str, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"index {index}: {reason}")


class SchemaMismatchError(SchemaError):
    """The database's schema is not the one this fairlane was built for.

    ``found`` is the database's revision (None: not migrated), ``needed`` the revision this
    package needs, ``differing`` the SQL objects whose installed checksum differs from this
    package's (revision equal). ``newer`` says the database is ahead of the package;
    ``missing_database`` names a database that does not exist at all.
    """

    def __init__(
        self,
        found: str | None,
        needed: str,
        *,
        differing: tuple[str, ...] = (),
        newer: bool = False,
        missing_database: str | None = None,
    ) -> None:
        self.found = found
        self.needed = needed
        self.differing = differing
        self.newer = newer
        self.missing_database = missing_database
        at = found or "none (not migrated)"
        if missing_database is not None:
            message = (
                f"database {missing_database!r} does not exist: run `fairlane migrate` "
                "(it creates the database)"
            )
        elif newer:
            message = (
                f"database schema is at {at}, newer than this fairlane ({needed}): upgrade fairlane"
            )
        elif differing:
            shown = ", ".join(differing[:5]) + (", ..." if len(differing) > 5 else "")
            message = (
                f"database schema is at {at} but {len(differing)} SQL objects differ from "
                f"this fairlane's ({shown}): run `fairlane migrate`"
            )
        else:
            message = (
                f"database schema is at {at}, this fairlane needs {needed}: run `fairlane migrate`"
            )
        super().__init__(message)


class ApiKeyNotFoundError(NotFoundError):
    """No API key has that id (in the environment given, if one was)."""

    def __init__(self, key_id: int) -> None:
        self.key_id = key_id
        super().__init__(f"API key {key_id} does not exist")


class TokenNotFoundError(WaitpointNotFoundError):
    """No token has that id (or it is not the caller's environment's)."""
