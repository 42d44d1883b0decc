"""Giving up on a connection whose server does not answer in time.

A server that is alive cancels a statement at its ``statement_timeout``. One that does not
answer at all (a stopped backend, a hung host, a network partition where the peer's kernel
still acknowledges, or not yet) cannot; TCP keepalives do not help while the peer's kernel
answers, and psycopg's own cancellation waits for the server. So when a deadline passes, the
connection's socket is shut down: the blocked read returns at once with an error, psycopg
marks the connection broken, and whoever was waiting gets an ``OperationalError``, which the
caller turns into ``DatabaseTimeout`` (``Deadline.expired`` says it was the deadline).

Sync callers share one watchdog thread per process; async callers use their event loop's
timer. Either way a deadline costs no thread and no round trip per statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg

log = logging.getLogger("fairlane.connection")

AnyConnection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]


def abort(conn: AnyConnection) -> None:
    """Shut the connection's socket down, so that a read blocked on it returns (a server that
    does not answer cannot be asked to cancel). The connection is unusable afterwards."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return  # closed already
    try:
        # A duplicate descriptor of the same socket: shutdown acts on the socket, and closing
        # the duplicate leaves psycopg's descriptor to psycopg.
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        log.debug("shutting down a connection's socket failed", exc_info=True)


class Deadline:
    """One armed deadline on one connection."""

    __slots__ = ("_armed", "conn", "expired", "seconds", "until")

    def __init__(self, conn: AnyConnection, seconds: float) -> None:
        self.conn = conn
        self.seconds = seconds
        self.until = time.monotonic() + seconds
        self.expired = False
        self._armed = True


class _Watchdog:
    """The process's thread that aborts sync connections whose deadline passed.

    Deadlines of one length are armed in time order, so each length keeps a FIFO queue and
    the watchdog only looks at the queues' heads; a deadline disarmed in time is dropped when
    it reaches its head."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queues: dict[float, deque[Deadline]] = {}
        self._thread: threading.Thread | None = None

    def arm(self, conn: psycopg.Connection[Any], seconds: float) -> Deadline:
        deadline = Deadline(conn, seconds)
        with self._cond:
            queue = self._queues.setdefault(seconds, deque())
            queue.append(deadline)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fairlane-deadlines", daemon=True
                )
                self._thread.start()
            elif len(queue) == 1:
                # A new head: the watchdog may be sleeping until a later deadline.
                self._cond.notify()
        return deadline

    def disarm(self, deadline: Deadline) -> None:
        with self._cond:
            deadline._armed = False
            queue = self._queues.get(deadline.seconds)
            while queue and not queue[0]._armed:
                queue.popleft()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                earliest: float | None = None
                for queue in self._queues.values():
                    while queue and (not queue[0]._armed or queue[0].until <= now):
                        deadline = queue.popleft()
                        if deadline._armed:
                            # Under the lock: the caller cannot disarm it meanwhile.
                            deadline._armed = False
                            deadline.expired = True
                            abort(deadline.conn)
                    if queue and (earliest is None or queue[0].until < earliest):
                        earliest = queue[0].until
                self._cond.wait(None if earliest is None else max(earliest - now, 0.001))


_watchdog = _Watchdog()


@contextlib.contextmanager
def bounded(conn: psycopg.Connection[Any], seconds: float | None) -> Iterator[Deadline | None]:
    """Abort ``conn`` if the block has not ended within ``seconds`` (None: no bound)."""
    if seconds is None:
        yield None
        return
    deadline = _watchdog.arm(conn, seconds)
    try:
        yield deadline
    finally:
        _watchdog.disarm(deadline)


@contextlib.asynccontextmanager
async def bounded_async(
    conn: psycopg.AsyncConnection[Any], seconds: float | None
) -> AsyncIterator[Deadline | None]:
    """``bounded`` for an async connection, on the running event loop's timer."""
    if seconds is None:
        yield None
        return
    deadline = Deadline(conn, seconds)

    def expire() -> None:
        deadline.expired = True
        abort(conn)

    handle = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        yield deadline
    finally:
        handle.cancel()
