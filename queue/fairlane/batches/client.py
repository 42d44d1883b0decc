"""``AsyncBatchClient``: batches through one autocommit connection of its own, opened on
first use and checked against the schema. (Batches are async only: ingest streams.)"""

from __future__ import annotations

from collections.abc import AsyncIterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import psycopg

from fairlane.batches.api import batch_items, create_batch, get_batch, set_batch_limits
from fairlane.batches.ingest import Progress, file_chunks, ingest_items
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.connection import DEFAULT_PREPARE_THRESHOLD, ConnectionOptions
from fairlane.models import Batch, IngestResult, ItemRow
from fairlane.schema.check import check_schema_async

AsyncConn = psycopg.AsyncConnection[Any]


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
            statement_timeout=None, application_name="fairlane batches",
            prepare_threshold=prepare_threshold,
        )  # fmt: skip
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
        self, environment: str, run_count: int, *, parent_run_id: int | None = None,
        idempotency_key: str | None = None,
    ) -> Batch:  # fmt: skip
        async with self._lock:
            return await create_batch(
                await self._connection(), environment, run_count, parent_run_id=parent_run_id,
                idempotency_key=idempotency_key, schema=self.schema,
            )  # fmt: skip

    async def ingest(
        self, batch_id: int, chunks: AsyncIterable[bytes], *, progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:  # fmt: skip
        """``ingest_items`` on this client's connection."""
        async with self._lock:
            return await ingest_items(
                await self._connection(), batch_id, chunks, schema=self.schema,
                progress=progress, first_index=first_index,
            )  # fmt: skip

    async def ingest_file(
        self, batch_id: int, path: str | Path, *, progress: Progress | None = None,
        first_index: int = 0,
    ) -> IngestResult:  # fmt: skip
        return await self.ingest(
            batch_id, file_chunks(path), progress=progress, first_index=first_index
        )

    async def get(self, batch_id: int) -> Batch:
        async with self._lock:
            return await get_batch(await self._connection(), batch_id, schema=self.schema)

    async def items(self, batch_id: int) -> list[ItemRow]:
        async with self._lock:
            return await batch_items(await self._connection(), batch_id, schema=self.schema)

    async def set_limits(self, environment: str, **limits: Any) -> None:
        async with self._lock:
            await set_batch_limits(
                await self._connection(), environment, schema=self.schema, **limits
            )

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()
