"""Stepping transactions against each other, statement by statement, without sleeps.

Each ``Session`` is one connection driven from its own thread. ``run`` executes a statement
and waits for it; ``start`` sends one and returns at once, so the test can step another
session meanwhile. ``blocked_or_done`` is the barrier: it polls the server until the
statement either finished or waits for a lock another session holds (``pg_blocking_pids``),
so a test says exactly which interleaving it means, and gets it every time:

    with sessions(dsn, 2) as (a, b):
        a.begin(); b.begin()
        a.run("UPDATE ...")            # a holds the row
        pending = b.start("UPDATE ...")
        b.blocked_or_done()            # b waits for a's lock (or, on code without the lock,
        a.commit()                     # ran through on its own snapshot)
        pending.result()
        b.commit()

A statement of code that decides from its own snapshot runs through where the fixed code
waits, so the same steps fail on the first and pass on the second.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg.rows import TupleRow

STEP_TIMEOUT = 30.0
Rows = list[TupleRow]


class Session:
    """One connection of an interleaving, with a thread that runs its statements."""

    def __init__(self, dsn: str, name: str) -> None:
        self.name = name
        self.conn: psycopg.Connection[TupleRow] = psycopg.connect(dsn, autocommit=True)
        pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert pid is not None
        self.pid = int(pid[0])
        self._monitor: psycopg.Connection[TupleRow] = psycopg.connect(dsn, autocommit=True)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"session-{name}")
        self._pending: Future[Rows] | None = None

    # -- statements ------------------------------------------------------------------------

    def start(
        self, statement: Any, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> Future[Rows]:
        """Send ``statement`` from this session's thread; the returned future holds its rows."""
        if self._pending is not None and not self._pending.done():
            raise RuntimeError(f"session {self.name} is still running its previous statement")
        self._pending = self._thread.submit(self._execute, statement, params)
        return self._pending

    def run(self, statement: Any, params: Sequence[Any] | dict[str, Any] | None = None) -> Rows:
        """Run ``statement`` to completion (it must not wait for another session)."""
        return self.start(statement, params).result(timeout=STEP_TIMEOUT)

    def _execute(self, statement: Any, params: Sequence[Any] | dict[str, Any] | None) -> Rows:
        cursor = self.conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []

    def begin(self) -> None:
        self.run("BEGIN")

    def commit(self) -> None:
        self.run("COMMIT")

    def rollback(self) -> None:
        self.run("ROLLBACK")

    # -- barriers --------------------------------------------------------------------------

    def blocked_or_done(self, timeout: float = STEP_TIMEOUT) -> bool:
        """Wait until this session's statement has finished (False) or waits for a lock that
        another session holds (True)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._pending is None or self._pending.done():
                return False
            if self.blockers():
                return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"session {self.name} neither finished nor blocked")
            time.sleep(0.002)

    def blocked(self, timeout: float = STEP_TIMEOUT) -> None:
        """Wait until this session's statement waits for another session's lock."""
        if not self.blocked_or_done(timeout):
            raise AssertionError(f"session {self.name} finished instead of waiting for a lock")

    def blockers(self) -> list[int]:
        """The backend pids of this test's database that this session's statement waits for.
        A session of another database is not one of the test's: a commit that sent
        notifications waits for the cluster-wide lock of the notification queue, which another
        database's committing session may hold for a moment."""
        row = self._monitor.execute(
            "SELECT coalesce(array_agg(activity.pid), '{}') FROM pg_stat_activity AS activity"
            " WHERE activity.pid = ANY (pg_blocking_pids(%s))"
            " AND activity.datname = current_database()",
            (self.pid,),
        ).fetchone()
        return list(row[0]) if row and row[0] else []

    def close(self) -> None:
        if self._pending is not None and not self._pending.done():
            # Unblock a statement still waiting so the thread can end.
            self._monitor.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
        self._thread.shutdown(wait=True)
        self.conn.close()
        self._monitor.close()


@contextmanager
def sessions(dsn: str, count: int) -> Iterator[list[Session]]:
    """``count`` sessions on the database, closed (and any open transaction rolled back) at
    the end."""
    with ExitStack() as stack:
        made: list[Session] = []
        for index in range(count):
            session = Session(dsn, "abcdefghij"[index])
            stack.callback(session.close)
            made.append(session)
        yield made
