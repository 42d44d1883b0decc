"""``RunWatcher``: ``AsyncRunWatcher`` (fairlane.watching) for ``Client``, whose waits are
threads. The same protocol with threading events, and the reader a thread of the watcher's
own: started by the first registration while none runs, it stops once nobody waits, looking at
least every ``IDLE_CHECK_S`` (a thread cannot be cancelled while it waits for the socket).

Unlike ``Client``, this module is written by hand, not generated from its async twin
(tools/async_to_sync.py): the async reader is one task on one thread, cancelled when the last
waiter leaves, so it needs no lock; this reader cannot be cancelled, so it wakes on a clock,
decides whether it goes on under a lock that registrations share, and is stopped through an
event that ``close`` sets and joins. That is a different lifecycle, not a different spelling
of the same one; only the constants and ``run_id_of`` are shared."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import psycopg

from fairlane.engine import engine
from fairlane.engine.statement import run
from fairlane.watching import RECONNECT_DELAY_S, RECONNECT_MAX_S, run_id_of

log = logging.getLogger("fairlane.client")

# How often the reader thread looks whether anybody still waits, between notifications.
IDLE_CHECK_S = 0.25


class RunWatcher:
    """``connect``: keyword arguments of the LISTEN connection, as ``AsyncRunWatcher``'s."""

    def __init__(self, dsn: str, schema: str, connect: Mapping[str, Any] | None = None) -> None:
        self._dsn = dsn
        self._connect = dict(connect or {"autocommit": True})
        self._listen = engine(schema).listen
        self._conn: psycopg.Connection[Any] | None = None
        self._connecting = threading.Lock()
        # Guards the waiters and the reader: whether one runs is decided with the waiters.
        self._lock = threading.Lock()
        self._waiters: dict[int, set[threading.Event]] = defaultdict(set)
        self._reader: threading.Thread | None = None
        self._closing = threading.Event()

    def _connection(self) -> psycopg.Connection[Any]:
        """The LISTENing connection; the first caller opens it, the others wait for it."""
        with self._connecting:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                conn = psycopg.Connection.connect(self._dsn, **self._connect)
                try:
                    run(conn, self._listen.finished())
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn
            return conn

    def start(self) -> None:
        """LISTEN (once): before a waiter reads its run, so no announcement is missed."""
        self._connection()

    def register(self, run_id: int) -> threading.Event:
        """An event set when ``run_id`` is announced (or the announcements may have been lost);
        starts the reader if none runs."""
        event = threading.Event()
        with self._lock:
            self._waiters[run_id].add(event)
            if self._reader is None and not self._closing.is_set():
                self._reader = threading.Thread(
                    target=self._read, name="fairlane finished-run reader", daemon=True
                )
                self._reader.start()
        return event

    def unregister(self, run_id: int, event: threading.Event) -> None:
        with self._lock:
            events = self._waiters.get(run_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[run_id]

    def wait(self, event: threading.Event, within: float) -> None:
        """Until ``event`` is set (its run was announced) or ``within`` seconds passed."""
        event.wait(within)

    def _still_needed(self) -> bool:
        """Whether the reader goes on; if not, it is no longer the reader (decided under the
        lock that registrations take, so a waiter that registers next starts a new one)."""
        with self._lock:
            if self._waiters and not self._closing.is_set():
                return True
            if self._reader is threading.current_thread():
                self._reader = None
            return False

    def _read(self) -> None:
        delay = RECONNECT_DELAY_S
        # A connection lost before this reader started: the waiters look again once it listens.
        lost = self._conn is None
        try:
            while self._still_needed():
                try:
                    conn = self._connection()
                    if lost:
                        self._wake_all()
                        lost, delay = False, RECONNECT_DELAY_S
                    # As in AsyncRunWatcher: a batch is always read to its end.
                    for notification in conn.notifies(timeout=IDLE_CHECK_S, stop_after=1):
                        self._dispatch(notification.payload)
                except psycopg.Error:
                    if self._closing.is_set():
                        continue
                    log.warning("the finished-run listener lost its connection", exc_info=True)
                    self._discard()
                    self._wake_all()
                    lost = True
                    self._closing.wait(delay)
                    delay = min(delay * 2, RECONNECT_MAX_S)
        except BaseException:
            # A bug: the waiters re-read their runs and, registering again, start a new reader.
            with self._lock:
                if self._reader is threading.current_thread():
                    self._reader = None
            self._wake_all()
            raise

    def _dispatch(self, payload: str) -> None:
        run_id = run_id_of(payload)
        if run_id is None:
            return
        with self._lock:
            for waiter in self._waiters.get(run_id, ()):
                waiter.set()

    def _wake_all(self) -> None:
        with self._lock:
            for events in self._waiters.values():
                for waiter in events:
                    waiter.set()

    def _discard(self) -> None:
        with self._connecting:
            conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing the listener raised", exc_info=True)

    def close(self) -> None:
        """Stop the reader (within ``IDLE_CHECK_S``) and close the connection."""
        self._closing.set()
        with self._lock:
            reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(IDLE_CHECK_S + 1.0)
        self._discard()
