"""Which psycopg errors mean the database is unavailable, and the fairlane errors they become.

- ``DatabaseTimeout``: the server cancelled a statement at its statement or lock timeout, or
  the statement went unanswered past its deadline and the connection was abandoned;
- ``DatabaseUnavailable``: no connection could be opened (refused, timed out, the server
  starting up or shutting down, too many connections), or the connection was lost;
- anything else (a constraint, a bug) is not an outage and stays a psycopg error.

``connect_failure`` tells the connection errors that waiting will not cure (a malformed DSN, a
missing database, a refused login) from an outage, for the start-up of a worker.
"""

from __future__ import annotations

import logging
import re
import time

import psycopg

from fairlane.connection.deadline import Deadline
from fairlane.connection.options import redact
from fairlane.errors import (
    ConfigurationError,
    DatabaseTimeout,
    DatabaseUnavailable,
    FairlaneError,
    SchemaMismatchError,
)

# The server going away or refusing new sessions: shutdown, crash, starting up, full.
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "53300", "53400"})
_LOCK_TIMEOUT = "55P03"
_QUERY_CANCELED = "57014"


def is_connection_lost(error: BaseException) -> bool:
    """Whether ``error`` says the connection itself failed (as opposed to the statement)."""
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate
    if state is not None:
        return state.startswith("08") or state in _UNAVAILABLE_STATES
    return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)


def unavailable(
    error: BaseException,
    *,
    sent: bool,
    deadline: Deadline | None = None,
) -> DatabaseUnavailable | None:
    """The fairlane error for ``error``, or None when it is not an outage."""
    if deadline is not None and deadline.expired:
        return DatabaseTimeout(
            f"the database did not answer within {deadline.seconds:g}s; connection abandoned",
            sent=sent,
        )
    if not isinstance(error, psycopg.Error):
        return None
    state = error.sqlstate
    if state == _QUERY_CANCELED and "timeout" in str(error):
        return DatabaseTimeout(_first_line(error), sent=sent)
    if state == _LOCK_TIMEOUT and "lock timeout" in str(error):
        return DatabaseTimeout(_first_line(error), sent=sent)
    if is_connection_lost(error):
        return DatabaseUnavailable(f"database unavailable: {_first_line(error)}", sent=sent)
    return None


def pool_timeout(seconds: float, last_error: BaseException | None) -> DatabaseUnavailable:
    """No connection came out of a pool in time."""
    why = f": {_first_line(last_error)}" if last_error is not None else ""
    return DatabaseUnavailable(f"no database connection within {seconds:g}s{why}", sent=False)


# -- connecting: an outage or a mistake ----------------------------------------------------

_MISSING_DATABASE = re.compile(r'database "([^"]*)" does not exist')
_REFUSED_LOGIN = re.compile(
    r"password authentication failed|role \"[^\"]*\" does not exist|no pg_hba\.conf entry"
    r"|authentication failed|password is required|permission denied for database"
    r"|is not permitted to log in"
)


def connect_failure(error: BaseException, schema_revision: str) -> FairlaneError | None:
    """The error to stop on when connecting failed with ``error`` and waiting cannot help; None
    for an outage (refused, timed out, starting up...), which is worth retrying."""
    text = str(error)
    if isinstance(error, psycopg.Error) and error.sqlstate is not None:
        # The server answered with an SQL error (a statement failed after connecting): not a
        # problem of the URL, and not an outage either.
        return None
    if isinstance(error, psycopg.ProgrammingError) or (
        isinstance(error, psycopg.OperationalError) and text.startswith("connection is bad:")
    ):
        # libpq refused the parameters before connecting: a bad port, an unknown option.
        reason = text.removeprefix("connection is bad:").strip()
        return ConfigurationError(f"malformed database URL: {_first_line(reason)}")
    missing = _MISSING_DATABASE.search(text)
    if missing:
        return SchemaMismatchError(None, schema_revision, missing_database=missing.group(1))
    if _REFUSED_LOGIN.search(text):
        return ConfigurationError(f"the database refused the login: {_server_message(text)}")
    return None


def _server_message(text: str) -> str:
    fatal = text.rfind("FATAL:")
    return _first_line(text[fatal + len("FATAL:") :] if fatal >= 0 else text)


def _first_line(error: BaseException | str) -> str:
    text = str(error).strip()
    return redact(text.splitlines()[0].strip() if text else type(error).__name__)


class Outage:
    """Logs an outage once: a warning when the first attempt fails, nothing while it lasts,
    one line when an attempt succeeds again (with how long it lasted)."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self._log = logger
        self.since: float | None = None
        self.failures = 0

    def failed(self, error: BaseException) -> None:
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            self._log.warning(
                "%s: database unavailable (%s); retrying", self.what, _describe(error)
            )
        else:
            self._log.debug("%s: still unavailable (%s)", self.what, _describe(error))

    def recovered(self) -> None:
        if self.since is not None:
            lasted = time.monotonic() - self.since
            self._log.info(
                "%s: database available again after %.1fs (%d failed attempts)",
                self.what,
                lasted,
                self.failures,
            )
        self.since = None
        self.failures = 0

    @property
    def ongoing(self) -> bool:
        return self.since is not None


def _describe(error: BaseException) -> str:
    name = type(error).__name__
    return f"{name}: {_first_line(error)}"


__all__ = [
    "Outage",
    "connect_failure",
    "is_connection_lost",
    "pool_timeout",
    "unavailable",
]
