"""``AsyncBatchClient``: batches through one autocommit connection of its own, opened on
first use and checked against the schema; ``client.batches`` of an ``AsyncClient``.

``BatchClient``, ``client.batches`` of a ``Client``, is the same client for sync code: an
ingest streams, pipelined on an event loop (one slice in flight while the next is parsed), so
rather than a second, sequential copy of that pipeline the sync client runs the async one on
an event loop thread of its own (``loop_thread.py``; started on first use, stopped by
``close``)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread
import psycopg

from fairlane.batches.api import (
    batch_items_async,
    create_batch_async,
    get_batch_async,
    set_batch_limits_async,
)
from fairlane.batches.ingest import Progress, file_chunks, ingest_items_async
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.connection import DEFAULT_PREPARE_THRESHOLD, ConnectionOptions
from fairlane.loop_thread import LoopThread
from fairlane.models import Batch, IngestResult, ItemRow
from fairlane.schema.check import check_schema_async

AsyncConn = psycopg.AsyncConnection[Any]
T = TypeVar("T")


class AsyncBatchClient:
    """Batches through one autocommit connection, opened on first use."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        # A connect timeout and keepalives; no statement timeout (an ingest slice is as long
        # as the caller's chunks make it).
        self.options = ConnectionOptions(
            statement_timeout=None,
            application_name="fairlane batches",
            prepare_threshold=prepare_threshold,
        )
        self._conn: AsyncConn | None = None
        self._lock = anyio.Lock()

    async def _connection(self) -> AsyncConn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = await psycopg.AsyncConnection.connect(self.dsn, **self.options.kwargs(self.dsn))
            try:
                await check_schema_async(conn, self.schema)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def create(
        self,
        environment: str,
        run_count: int,
        *,
        parent_run_id: int | None = None,
        idempotency_key: str | None = None,
    ) -> Batch:
        async with self._lock:
            return await create_batch_async(
                await self._connection(),
                environment,
                run_count,
                parent_run_id=parent_run_id,
                idempotency_key=idempotency_key,
                schema=self.schema,
            )

    async def ingest(
        self,
        batch_id: int,
        chunks: AsyncIterable[bytes],
        *,
        progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:
        """``ingest_items_async`` on this client's connection."""
        async with self._lock:
            return await ingest_items_async(
                await self._connection(),
                batch_id,
                chunks,
                schema=self.schema,
                progress=progress,
                first_index=first_index,
            )

    async def ingest_file(
        self,
        batch_id: int,
        path: str | Path,
        *,
        progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:
        return await self.ingest(
            batch_id, file_chunks(path), progress=progress, first_index=first_index
        )

    async def get(self, batch_id: int) -> Batch:
        async with self._lock:
            return await get_batch_async(await self._connection(), batch_id, schema=self.schema)

    async def items(self, batch_id: int) -> list[ItemRow]:
        async with self._lock:
            return await batch_items_async(await self._connection(), batch_id, schema=self.schema)

    async def set_limits(self, environment: str, **limits: Any) -> None:
        async with self._lock:
            await set_batch_limits_async(
                await self._connection(), environment, schema=self.schema, **limits
            )

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class BatchClient:
    """``AsyncBatchClient`` for sync code, method for method (``ingest`` takes an iterable of
    bytes, read on a worker thread; ``progress`` is called on the client's event loop thread).
    Threads may share it: its calls take turns, as the async client's do."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        self._client = AsyncBatchClient(dsn, schema=schema, prepare_threshold=prepare_threshold)
        self.dsn, self.schema = self._client.dsn, self._client.schema
        self.options = self._client.options
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None

    def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = LoopThread("fairlane batches")
            loop = self._loop

        async def call() -> T:
            return await work()

        return loop.portal.call(call)

    def create(
        self,
        environment: str,
        run_count: int,
        *,
        parent_run_id: int | None = None,
        idempotency_key: str | None = None,
    ) -> Batch:
        return self._call(
            partial(
                self._client.create,
                environment,
                run_count,
                parent_run_id=parent_run_id,
                idempotency_key=idempotency_key,
            )
        )

    def ingest(
        self,
        batch_id: int,
        chunks: Iterable[bytes],
        *,
        progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:
        """``ingest_items_async`` on this client's connection."""
        return self._call(
            lambda: self._client.ingest(
                batch_id,
                _read_on_threads(iter(chunks)),
                progress=progress,
                first_index=first_index,
            )
        )

    def ingest_file(
        self,
        batch_id: int,
        path: str | Path,
        *,
        progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:
        return self._call(
            partial(
                self._client.ingest_file,
                batch_id,
                path,
                progress=progress,
                first_index=first_index,
            )
        )

    def get(self, batch_id: int) -> Batch:
        return self._call(partial(self._client.get, batch_id))

    def items(self, batch_id: int) -> list[ItemRow]:
        return self._call(partial(self._client.items, batch_id))

    def set_limits(self, environment: str, **limits: Any) -> None:
        self._call(partial(self._client.set_limits, environment, **limits))

    def close(self) -> None:
        """Close the connection and stop the event loop thread."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.portal.call(self._client.close)
            finally:
                loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_DONE = object()


async def _read_on_threads(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A sync iterator's chunks, each read on a worker thread so that the event loop sends
    the previous slice meanwhile."""
    while (chunk := await anyio.to_thread.run_sync(next, chunks, _DONE)) is not _DONE:
        yield chunk  # type: ignore[misc]
