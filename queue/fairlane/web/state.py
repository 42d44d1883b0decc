"""What one app holds: its settings (the dashboard's session idle time among them), a
connection pool opened on first use, the signing secrets.

The pool opens lazily (on the first request) rather than in the app's lifespan, because an app
mounted inside another gets no lifespan events of its own; ``fairlane serve`` closes it at
shutdown, and a host app can ``await state.close()`` from its own lifespan. The database's
schema is checked once, when the pool opens: a mismatch answers 503 and is checked again on
the next request.
"""

from __future__ import annotations

import math
import secrets as random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool

from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.engine import Engine, engine
from fairlane.engine.statement import one_async
from fairlane.errors import ConfigurationError
from fairlane.schema.check import check_schema_async
from fairlane.web.realtime.dispatcher import Dispatcher
from fairlane.web.realtime.settings import StreamSettings
from fairlane.web.realtime.slots import StreamSlots
from fairlane.web.uploads import UploadSlots, idle_timeout

AsyncConn = psycopg.AsyncConnection[Any]
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_POOL_SIZE = 10
DEFAULT_SESSION_IDLE_S = 30 * 60.0


class WebState:
    def __init__(
        self,
        dsn: str | None = None,
        schema: str | None = None,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        max_body_bytes: int | None = None,
        pool_timeout: float = 10.0,
        session_idle_s: float = DEFAULT_SESSION_IDLE_S,
        upload_idle_timeout: float | None = None,
        uploads_per_environment: int | None = None,
        streams: StreamSettings | None = None,
    ) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        self.engine: Engine = engine(self.schema)
        self.pool_size = max(1, pool_size)
        self.pool_timeout = pool_timeout
        self.max_body_bytes = max_body_bytes or DEFAULT_MAX_BODY_BYTES
        self.session_idle_s = _idle_seconds(session_idle_s)
        self.upload_idle_timeout_s = idle_timeout(upload_idle_timeout)
        self.uploads = UploadSlots(uploads_per_environment)
        self.stream_settings = streams or StreamSettings()
        self.streams = StreamSlots(self.stream_settings.per_environment, self.stream_settings.total)
        self.dispatcher = Dispatcher(
            self.dsn, self.engine, self.connection, listen_timeout=pool_timeout
        )
        self._pool: AsyncConnectionPool[AsyncConn] | None = None
        self._opening: anyio.Lock | None = None
        self._secrets: dict[str, bytes] = {}

    async def _open(self) -> AsyncConnectionPool[AsyncConn]:
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._pool is not None:
                return self._pool
            pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                open=False,
                kwargs={"autocommit": True},
                name="fairlane.web",
                timeout=self.pool_timeout,
            )
            try:
                await pool.open(wait=True, timeout=self.pool_timeout)
                async with pool.connection() as conn:
                    await check_schema_async(conn, self.schema)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool
            return pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConn]:
        """An autocommit connection of the pool, for database work only: a request gives it
        back before it waits on its client (reads a body, streams an upload), so a slow or
        stalled client cannot hold the pool."""
        pool = self._pool or await self._open()
        async with pool.connection() as conn:
            yield conn

    async def secret(self, name: str) -> bytes:
        """A signing secret, stored in the database on first use (so every server process of
        the database signs alike), then kept in memory."""
        found = self._secrets.get(name)
        if found is None:
            async with self.connection() as conn:
                statement = self.engine.web.ensure_secret(name, random.token_bytes(32))
                found = await one_async(conn, statement)
            self._secrets[name] = found
        return found

    async def close(self) -> None:
        await self.dispatcher.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


def _idle_seconds(value: float) -> float:
    """A dashboard session's idle time: a positive number of seconds (at least a second, so
    that a session can serve a page at all)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"session_idle must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ConfigurationError(f"session_idle must be at least 1 second, not {value!r}")
    return float(value)
