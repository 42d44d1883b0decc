"""What ``Client`` and ``AsyncClient`` need from their psycopg_pool: connection classes that
remember why the last connection attempt failed (a pool only says it timed out), and a check,
costing no round trip, for a connection the server closed while it sat idle.

The clients check their own pool's connections themselves rather than through the pool's
``check``: after consecutive failed checks psycopg_pool sleeps 1, 2, 4 s..., so a pool of a few
connections that a server restart killed would outlast the connect timeout. ``CHECK_TIMEOUT_S``
bounds a check; a connection that fails it is discarded and the next one tried at once.

psycopg_pool backs off the same way when it fails to open a connection: it tries again after
1, 2, 4 s..., for ``reconnect_timeout`` (5 minutes by its default), and opens no other
connection meanwhile. After an outage of some seconds, the callers of a client used during it
would wait for the next of those attempts and fail at their connect timeout although the
server was back. So the clients' own pools give up on a failed attempt at once
(``RECONNECT_TIMEOUT_S``), and a caller asks for a connection in slices of ``GETCONN_SLICE_S``,
each of which has the pool try again if no attempt is under way: a call finds a server that
came back within a slice, even one that came back while it waited.

A check is a round trip, as long as a short statement: a connection that answered within
``check_idle_after`` goes out unchecked (``RecentAnswers``), as a pool that validates only
connections idle past a window does. A connection the server dropped is still noticed without a
round trip (``closed_while_idle``); one that hung since its last answer is bounded by the
statement's own deadline instead of being replaced before it.
"""

from __future__ import annotations

import select
import time
import weakref
from typing import Any, Self

import psycopg
from psycopg.pq import ConnStatus, TransactionStatus

from fairlane.errors import ConfigurationError

# A pooled connection that does not answer an empty query within this is replaced.
CHECK_TIMEOUT_S = 1.0
# A pooled connection that answered within this goes out without the check.
DEFAULT_CHECK_IDLE_AFTER = 0.5
# A client's own pool gives up on a failed attempt to open a connection after one immediate
# repeat, instead of backing off for minutes; the next caller has it try again.
RECONNECT_TIMEOUT_S = 0.0
# A caller waits for a pooled connection this long at a time, then asks again (the pool then
# tries to connect again if it was not trying), until its connect timeout.
GETCONN_SLICE_S = 0.25
# A failure older than this says nothing about why a pool timed out now.
_RECENT_S = 60.0


class RecentAnswers:
    """When each of a pool's connections last answered, to skip the check of one that just
    did. Connections are held weakly: one the pool discards is forgotten with it."""

    def __init__(self, check_idle_after: float) -> None:
        if not check_idle_after >= 0:
            raise ConfigurationError(
                f"check_idle_after must be 0 or more seconds, not {check_idle_after!r}"
            )
        self.check_idle_after = check_idle_after
        self._answered: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()

    def answered(self, conn: object) -> None:
        self._answered[conn] = time.monotonic()

    def needs_check(self, conn: object) -> bool:
        last = self._answered.get(conn)
        return last is None or time.monotonic() - last >= self.check_idle_after


class ConnectFailures:
    """The last error a pool's connection attempts met, cleared by a success."""

    def __init__(self) -> None:
        self.last: BaseException | None = None
        self._at = 0.0

    def failed(self, error: BaseException) -> None:
        self.last = error
        self._at = time.monotonic()

    def succeeded(self) -> None:
        self.last = None

    def recent(self) -> BaseException | None:
        if self.last is not None and time.monotonic() - self._at < _RECENT_S:
            return self.last
        return None


# -- async, written once: the sync section below is generated from it ----------------------


def recording_connection_async(failures: ConnectFailures) -> type[psycopg.AsyncConnection[Any]]:
    """A connection class whose connects report to ``failures``."""

    class AsyncRecordingConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = await super().connect(conninfo, **kwargs)
            except psycopg.Error as error:
                failures.failed(error)
                raise
            failures.succeeded()
            return conn

    return AsyncRecordingConnection


# -- sync, generated from the async section above by tools/async_to_sync.py: do not edit ----


def recording_connection(failures: ConnectFailures) -> type[psycopg.Connection[Any]]:
    """A connection class whose connects report to ``failures``."""

    class RecordingConnection(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.Error as error:
                failures.failed(error)
                raise
            failures.succeeded()
            return conn

    return RecordingConnection


# -- end of the generated sync section -------------------------------------------------------


def closed_while_idle(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection is known dead before anything is sent on it: closed, or
    its server has written to it while it was idle (a terminated backend sends its FATAL
    and closes) and reading that shows the connection gone. No round trip."""
    if conn.closed or conn.broken:
        return True
    pgconn = conn.pgconn
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return False
    # A terminated backend's FATAL message and its end of stream may come in two reads.
    for _ in range(3):
        try:
            readable, _, _ = select.select([pgconn.socket], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return False  # cannot tell: let the statement find out
        if not readable:
            break
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            return True
    return pgconn.status != ConnStatus.OK
