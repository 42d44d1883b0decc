"""Waiting for runs from outside a handler: ``Client.wait_for_run`` and
``AsyncClient.wait_for_run``.

A client that waits opens a second connection, which LISTENs on the finished channel
(``<schema>.finished``, payload: the run id). ``control.watch_run`` marks the awaited run so
that the transaction that ends it announces it there (the trigger of
``sql/waitpoints/completion.sql``, which also completes the run's waitpoint), and the waiter
sleeps until its run is announced, re-reading the run only then, or after ``poll_interval`` as
a fallback (a notification lost to a dropped connection).

Many waits share the listening connection: whichever waiter finds nobody reading reads the
notifications and hands each one to the waiters of its run; when it leaves (its own run ended,
or its time ran out) it wakes another waiter, which takes over. A waiter registers before it
reads its run's status, so a run that ends in between is still announced to it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import anyio
import psycopg

from fairlane.engine import engine
from fairlane.engine.statement import run, run_async

log = logging.getLogger("fairlane.client")

# The fallback: a waiter re-reads its run at least this often, whatever it was told.
POLL_INTERVAL_S = 10.0


def _run_id(payload: str) -> int | None:
    try:
        return int(payload)
    except ValueError:
        return None


class AsyncRunWatcher:
    """``connect``: keyword arguments of the LISTEN connection (the client's connect timeout,
    keepalives and statement timeout, so that a frozen server cannot hold a waiter up)."""

    def __init__(self, dsn: str, schema: str, connect: Mapping[str, Any] | None = None) -> None:
        self._dsn = dsn
        self._connect = dict(connect or {"autocommit": True})
        self._listen = engine(schema).listen
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._waiters: dict[int, set[anyio.Event]] = defaultdict(set)
        self._reading = False

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = await psycopg.AsyncConnection.connect(self._dsn, **self._connect)
            await run_async(conn, self._listen.finished())
            self._conn = conn
        return self._conn

    async def start(self) -> None:
        """LISTEN (once): before a waiter reads its run, so no announcement is missed."""
        await self._connection()

    def register(self, run_id: int) -> anyio.Event:
        event = anyio.Event()
        self._waiters[run_id].add(event)
        return event

    def unregister(self, run_id: int, event: anyio.Event) -> None:
        events = self._waiters.get(run_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiters[run_id]

    async def wait(self, event: anyio.Event, within: float) -> None:
        """Until ``event`` is set (its run was announced) or ``within`` seconds passed."""
        deadline = anyio.current_time() + within
        while not event.is_set():
            left = deadline - anyio.current_time()
            if left <= 0:
                return
            if self._reading:
                # Another waiter reads; it sets our event, or wakes us when it leaves.
                with anyio.move_on_after(left):
                    await event.wait()
                continue
            self._reading = True
            try:
                await self._read(event, left)
            finally:
                self._reading = False
                self._hand_over(event)

    async def _read(self, event: anyio.Event, within: float) -> None:
        try:
            conn = await self._connection()
            # Never broken off mid-batch: notifications that arrive together come in one batch,
            # and those left in a closed generator would be lost to the other waiters.
            # stop_after ends the generator after the batch that holds the first one.
            deadline = anyio.current_time() + within
            while not event.is_set() and (left := deadline - anyio.current_time()) > 0:
                async for notification in conn.notifies(timeout=left, stop_after=1):
                    self._dispatch(notification.payload)
        except psycopg.OperationalError:
            # Announcements may have been lost with the connection: every waiter looks again.
            log.warning("the finished-run listener lost its connection", exc_info=True)
            await self._discard()
            self._wake_all()
            await anyio.sleep(0.5)

    def _dispatch(self, payload: str) -> None:
        run_id = _run_id(payload)
        for waiter in self._waiters.get(run_id, ()) if run_id is not None else ():
            waiter.set()

    def _hand_over(self, leaving: anyio.Event) -> None:
        """Wake one other waiter to take over reading (it reads its run once, then reads)."""
        for events in self._waiters.values():
            for waiter in events:
                if waiter is not leaving and not waiter.is_set():
                    waiter.set()
                    return

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for waiter in events:
                waiter.set()

    async def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                await conn.close()
            except psycopg.Error:
                log.debug("closing the listener raised", exc_info=True)

    async def close(self) -> None:
        await self._discard()


class RunWatcher:
    """``AsyncRunWatcher`` for threads: the same protocol with threading events."""

    def __init__(self, dsn: str, schema: str, connect: Mapping[str, Any] | None = None) -> None:
        self._dsn = dsn
        self._connect = dict(connect or {"autocommit": True})
        self._listen = engine(schema).listen
        self._conn: psycopg.Connection[Any] | None = None
        self._waiters: dict[int, set[threading.Event]] = defaultdict(set)
        self._lock = threading.Lock()
        self._reading = False

    def _connection(self) -> psycopg.Connection[Any]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                conn = psycopg.Connection.connect(self._dsn, **self._connect)
                run(conn, self._listen.finished())
                self._conn = conn
            return self._conn

    def start(self) -> None:
        self._connection()

    def register(self, run_id: int) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiters[run_id].add(event)
        return event

    def unregister(self, run_id: int, event: threading.Event) -> None:
        with self._lock:
            events = self._waiters.get(run_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[run_id]

    def wait(self, event: threading.Event, within: float) -> None:
        deadline = time.monotonic() + within
        while not event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with self._lock:
                reader = not self._reading
                self._reading = True
            if not reader:
                event.wait(left)
                continue
            try:
                self._read(event, left)
            finally:
                with self._lock:
                    self._reading = False
                    self._hand_over(event)

    def _read(self, event: threading.Event, within: float) -> None:
        try:
            conn = self._connection()
            # As in AsyncRunWatcher: a batch is always read to its end.
            deadline = time.monotonic() + within
            while not event.is_set() and (left := deadline - time.monotonic()) > 0:
                for notification in conn.notifies(timeout=left, stop_after=1):
                    self._dispatch(notification.payload)
        except psycopg.OperationalError:
            log.warning("the finished-run listener lost its connection", exc_info=True)
            self._discard()
            with self._lock:
                for events in self._waiters.values():
                    for waiter in events:
                        waiter.set()
            threading.Event().wait(0.5)

    def _dispatch(self, payload: str) -> None:
        run_id = _run_id(payload)
        if run_id is None:
            return
        with self._lock:
            waiters = list(self._waiters.get(run_id, ()))
        for waiter in waiters:
            waiter.set()

    def _hand_over(self, leaving: threading.Event) -> None:
        # Called with the lock held.
        for events in self._waiters.values():
            for waiter in events:
                if waiter is not leaving and not waiter.is_set():
                    waiter.set()
                    return

    def _discard(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing the listener raised", exc_info=True)

    def close(self) -> None:
        self._discard()
