"""Waiting for runs from outside a handler: ``Client.wait_for_run`` and
``AsyncClient.wait_for_run``.

A client that waits opens a second connection, which LISTENs on the finished channel
(``<schema>.finished``, payload: the run id). ``control.watch_run`` marks the awaited run so
that the transaction that ends it announces it there (the trigger of
``sql/waitpoints/completion.sql``, which also completes the run's waitpoint), and the waiter
sleeps until its run is announced, re-reading the run only then, or after ``poll_interval`` as
a fallback (a notification lost to a dropped connection).

Every wait of a client shares that one connection, opened under a lock however many waits
start at once, and one reader: a task of the watcher's own (``AsyncRunWatcher``) reads every
notification and sets the events of its run's waiters. No waiter ever reads, so none has a
role to hand over when it leaves: the reader runs while any waiter is registered (the first
registration starts it) and is cancelled once none is. A waiter registers before it reads its
run's status, so a run that ends in between is still announced to it. When the connection is
lost, the reader opens a new one, LISTENs again and only then wakes every waiter to re-read
its run (an announcement may have been lost in between).

``RunWatcher``, ``Client``'s, is that watcher for threads, not a second one: it runs an
``AsyncRunWatcher`` on an event loop thread of its own (``loop_thread.py``), and its waiters
are ``threading.Event`` objects, which the reader sets from that thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Protocol

import anyio
import psycopg

from fairlane.engine import engine
from fairlane.engine.statement import run_async
from fairlane.loop_thread import LoopThread

log = logging.getLogger("fairlane.client")

# The fallback: a waiter re-reads its run at least this often, whatever it was told.
POLL_INTERVAL_S = 10.0
# After a failed attempt to listen again, the reader tries again after this, doubling to
# RECONNECT_MAX_S while it keeps failing.
RECONNECT_DELAY_S = 0.5
RECONNECT_MAX_S = 5.0


def run_id_of(payload: str) -> int | None:
    try:
        return int(payload)
    except ValueError:
        return None


class Waiter(Protocol):
    """What the reader sets when a waiter's run is announced: an ``anyio.Event``, or a
    ``threading.Event`` of ``RunWatcher``'s."""

    def set(self) -> None: ...


class AsyncRunWatcher:
    """``connect``: keyword arguments of the LISTEN connection (the client's connect timeout,
    keepalives and statement timeout, so that a frozen server cannot hold a waiter up)."""

    def __init__(self, dsn: str, schema: str, connect: Mapping[str, Any] | None = None) -> None:
        self._dsn = dsn
        self._connect = dict(connect or {"autocommit": True})
        self._listen = engine(schema).listen
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = anyio.Lock()
        self._waiters: dict[int, set[Waiter]] = defaultdict(set)
        self._reader: asyncio.Task[None] | None = None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The LISTENing connection; the first caller opens it, the others wait for it."""
        async with self._connecting:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                conn = await psycopg.AsyncConnection.connect(self._dsn, **self._connect)
                try:
                    await run_async(conn, self._listen.finished())
                except BaseException:
                    await conn.close()
                    raise
                self._conn = conn
            return conn

    async def start(self) -> None:
        """LISTEN (once): before a waiter reads its run, so no announcement is missed."""
        await self._connection()

    def register(self, run_id: int) -> anyio.Event:
        """An event set when ``run_id`` is announced (or the announcements may have been lost);
        starts the reader if none runs."""
        event = anyio.Event()
        self.add(run_id, event)
        return event

    def add(self, run_id: int, event: Waiter) -> None:
        """``register`` with an event of the caller's (on the watcher's event loop)."""
        self._waiters[run_id].add(event)
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(
                self._read(), name="fairlane finished-run reader"
            )

    def unregister(self, run_id: int, event: Waiter) -> None:
        events = self._waiters.get(run_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiters[run_id]
        if not self._waiters and self._reader is not None:
            # Nobody waits. Cancelled while it waits for the socket, the reader has consumed
            # nothing: what arrives meanwhile is read by the next reader.
            self._reader.cancel()
            self._reader = None

    async def wait(self, event: anyio.Event, within: float) -> None:
        """Until ``event`` is set (its run was announced) or ``within`` seconds passed."""
        with anyio.move_on_after(within):
            await event.wait()

    async def _read(self) -> None:
        delay = RECONNECT_DELAY_S
        # A connection lost before this reader started (its predecessor was stopped while it
        # waited to listen again): the waiters look again once it listens.
        lost = self._conn is None
        try:
            while self._waiters:
                try:
                    conn = await self._connection()
                    if lost:
                        # Listening again: announcements made meanwhile are lost, so every
                        # waiter looks at its run.
                        self._wake_all()
                        lost, delay = False, RECONNECT_DELAY_S
                    # A batch is always read to its end: stop_after ends the generator after
                    # the batch that holds the first notification.
                    async for notification in conn.notifies(stop_after=1):
                        self._dispatch(notification.payload)
                except psycopg.Error:
                    log.warning("the finished-run listener lost its connection", exc_info=True)
                    await self._discard()
                    self._wake_all()
                    lost = True
                    await anyio.sleep(delay)
                    delay = min(delay * 2, RECONNECT_MAX_S)
        except BaseException:
            # Cancelled (nobody waits any more, or the client closes), or a bug: a waiter still
            # registered re-reads its run and, registering again, starts a new reader.
            self._wake_all()
            raise
        finally:
            if self._reader is asyncio.current_task():
                self._reader = None

    def _dispatch(self, payload: str) -> None:
        run_id = run_id_of(payload)
        for waiter in self._waiters.get(run_id, ()) if run_id is not None else ():
            waiter.set()

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for waiter in events:
                waiter.set()

    async def _discard(self) -> None:
        async with self._connecting:
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                await conn.close()
            except psycopg.Error:
                log.debug("closing the listener raised", exc_info=True)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.wait([reader])
        await self._discard()


class RunWatcher:
    """``AsyncRunWatcher`` for ``Client``, whose waits are threads: the same watcher, run on an
    event loop thread of its own (started by the first call, stopped by ``close``), method for
    method; an event is a ``threading.Event``, set from that thread. ``connect`` as
    ``AsyncRunWatcher``'s."""

    def __init__(self, dsn: str, schema: str, connect: Mapping[str, Any] | None = None) -> None:
        self._watcher = AsyncRunWatcher(dsn, schema, connect)
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None
        self._closed = False

    def _running(self) -> LoopThread | None:
        """The loop thread, started on first use; None once the watcher is closed."""
        with self._lock:
            if self._loop is None and not self._closed:
                self._loop = LoopThread("fairlane finished-run reader")
            return self._loop

    def start(self) -> None:
        """LISTEN (once): before a waiter reads its run, so no announcement is missed."""
        loop = self._running()
        if loop is not None:
            loop.portal.call(self._watcher.start)

    def register(self, run_id: int) -> threading.Event:
        """An event set when ``run_id`` is announced (or the announcements may have been lost);
        starts the reader if none runs. Once the watcher is closed nobody sets it: the waiter
        falls back to its poll."""
        event = threading.Event()
        loop = self._running()
        if loop is not None:
            loop.portal.call(self._watcher.add, run_id, event)
        return event

    def unregister(self, run_id: int, event: threading.Event) -> None:
        with self._lock:
            loop = self._loop
        if loop is None:
            return
        try:
            loop.portal.call(self._watcher.unregister, run_id, event)
        except RuntimeError:
            # The portal stopped: ``close`` ran on another thread meanwhile and took the reader
            # with it; raising here, in the waiter's ``finally``, would hide what ended the wait.
            if not self._closed:
                raise

    def wait(self, event: threading.Event, within: float) -> None:
        """Until ``event`` is set (its run was announced) or ``within`` seconds passed."""
        event.wait(within)

    def close(self) -> None:
        """Stop the reader, close the connection and stop the loop thread."""
        with self._lock:
            loop, self._loop, self._closed = self._loop, None, True
        if loop is not None:
            try:
                loop.portal.call(self._watcher.close)
            finally:
                loop.stop()
