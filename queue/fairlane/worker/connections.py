"""A worker loop's own connection, reopened after the server or network drops it, with every
statement bounded.

Each connection is opened with the worker's ``ConnectionOptions``: a connect timeout, TCP
keepalives, a ``statement_timeout``, and with ``Worker(durable_claims=False)`` the claim
connection's ``synchronous_commit=off``, all as connection parameters (never a session-level
SET, which would leak to other clients through a transaction-pooling PgBouncer). ``use`` arms
a deadline past the statement timeout: a server that does not answer at all has its connection
abandoned (fairlane.connection.deadline), the loop's statement fails, and the loop reconnects.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg

from fairlane.connection import ConnectionOptions, bounded_async

log = logging.getLogger("fairlane.worker")

AsyncConn = psycopg.AsyncConnection[Any]


class LoopConnection:
    """One autocommit connection per worker loop, so loops never wait on each other.

    Server settings other than the timeouts come in ``options.settings``; the worker's only
    one is the fast claims' ``synchronous_commit=off``.
    """

    def __init__(
        self,
        dsn: str,
        options: ConnectionOptions | None = None,
        *,
        on_connect: Callable[[AsyncConn], Awaitable[None]] | None = None,
    ) -> None:
        self._dsn = dsn
        self.options = options or ConnectionOptions(application_name="fairlane worker")
        self._kwargs = self.options.kwargs(dsn)
        # Run on every new connection before it is used (the worker's schema check).
        self._on_connect = on_connect
        self._conn: AsyncConn | None = None

    @property
    def current(self) -> AsyncConn | None:
        """The open connection, if any (for tests and diagnostics)."""
        return self._conn

    async def get(self) -> AsyncConn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = await psycopg.AsyncConnection.connect(self._dsn, **self._kwargs)
            try:
                if self._on_connect is not None:
                    async with bounded_async(conn, self.options.answer_within):
                        await self._on_connect(conn)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConn]:
        """The connection, for statements that must be answered within the statement timeout
        (plus ``ABORT_GRACE_S``); past that the connection is abandoned and they fail with
        ``psycopg.OperationalError``."""
        conn = await self.get()
        async with bounded_async(conn, self.options.answer_within):
            yield conn

    async def discard(self) -> None:
        """Drop the connection after an error; the next ``get`` opens a new one."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                await conn.close()
            except psycopg.Error:
                log.debug("closing a failed connection raised", exc_info=True)

    async def close(self) -> None:
        await self.discard()
