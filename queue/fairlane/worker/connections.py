"""A worker loop's own connection, reopened after the server or network drops it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

log = logging.getLogger("fairlane.worker")


class LoopConnection:
    """One autocommit connection per worker loop, so loops never wait on each other.

    ``synchronous_commit`` may be turned off for statements whose loss in a server crash is
    harmless: a lost claim leaves the run QUEUED, a lost heartbeat is repeated. Outcomes are
    always written with the server's default durability.
    """

    def __init__(
        self,
        dsn: str,
        *,
        synchronous_commit: bool = True,
        on_connect: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    ) -> None:
        self._dsn = dsn
        self._synchronous_commit = synchronous_commit
        # Run on every new connection before it is used (the worker's schema check).
        self._on_connect = on_connect
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def get(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
            try:
                if self._on_connect is not None:
                    await self._on_connect(conn)
                if not self._synchronous_commit:
                    await conn.execute("SET synchronous_commit = off")
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

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
