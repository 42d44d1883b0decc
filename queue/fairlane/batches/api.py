"""Batch triggers, two phases: ``create_batch``, then ``ingest_items`` (NDJSON bytes in chunks).

Phase one charges the environment's token bucket with the run count (``BatchRateLimitedError``
carries the time to retry). Phase two streams items; each slice of parsed items is one
statement, committed on its own, so a bad line (``BatchLineError``, ``BatchIndexError``)
leaves everything before it in the batch and the batch open: resend from anywhere, items are
deduplicated by index. Items without an index are numbered from the call's ``first_index``
(default 0), so a resend of a stream from its k-th item passes ``first_index=k``; the
errors' ``index`` is that number for the bad line. The batch seals when all run-count items
are in; the worker's built-in ``fairlane.batch_item`` task then turns each into its run
(``fairlane.batches.processing``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg.pq import TransactionStatus

from fairlane.batches.ndjson import (
    BatchLineError,
    NdjsonItemParser,
    OversizedItem,
    ParsedLine,
    check_first_index,
)
from fairlane.config import database_url, psycopg_dsn, schema_name
from fairlane.engine.sqlfiles import query
from fairlane.errors import (
    BatchAbortedError,
    BatchIndexError,
    BatchNotFoundError,
    BatchRateLimitedError,
    BatchTooLargeError,
    BatchTransactionError,
    PayloadError,
)
from fairlane.payload import encode_json
from fairlane.schema.check import check_schema_async

AsyncConn = psycopg.AsyncConnection[Any]
# Parsed items sent per statement.
SLICE_ITEMS = 500
FILE_CHUNK_BYTES = 256 * 1024
Progress = Callable[["IngestResult"], None]


@dataclass(frozen=True, slots=True)
class Batch:
    id: int
    environment: str
    run_count: int
    status: str
    sealed: bool
    succeeded: int
    failed: int
    parent_run_id: int | None
    waitpoint_id: int | None
    idempotency_key: str | None
    created_at: datetime
    sealed_at: datetime | None
    completed_at: datetime | None
    error: dict[str, Any] | None
    received: int

    @property
    def done(self) -> bool:
        return self.status in ("COMPLETED", "PARTIAL_FAILED", "ABORTED")


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Where a batch stands after an ingest call: ``accepted`` new items in this call
    (``oversized`` of them pre-failed), ``received`` items in the batch overall."""

    batch_id: int
    accepted: int
    received: int
    run_count: int
    sealed: bool
    status: str
    oversized: int = 0
    lines: int = 0


def _batch(row: Any) -> Batch:
    return Batch(*row)


async def _one(conn: AsyncConn, name: str, params: dict[str, Any], schema: str) -> Any:
    cursor = await conn.execute(query(name, schema), params)
    return await cursor.fetchone()


async def get_batch(conn: AsyncConn, batch_id: int, *, schema: str | None = None) -> Batch:
    row = await _one(conn, "get_batch", {"id": batch_id}, schema_name(schema))
    if row is None:
        raise BatchNotFoundError(batch_id)
    return _batch(row)


async def batch_items(
    conn: AsyncConn, batch_id: int, *, schema: str | None = None
) -> list[tuple[int, str, int | None, dict[str, Any] | None]]:
    """(index, state, run id, error) of every item received, by index."""
    cursor = await conn.execute(query("batch_run_ids", schema_name(schema)), {"id": batch_id})
    return [(int(i), str(s), r, e) for i, s, r, e in await cursor.fetchall()]


async def create_batch(
    conn: AsyncConn,
    environment: str,
    run_count: int,
    *,
    parent_run_id: int | None = None,
    idempotency_key: str | None = None,
    schema: str | None = None,
) -> Batch:
    """Phase one. With ``parent_run_id`` the batch gets a BATCH waitpoint the parent waits on
    (``ctx.wait_for_batch``). The same ``idempotency_key`` in the environment returns the
    existing batch, uncharged."""
    target = schema_name(schema)
    if isinstance(run_count, bool) or not isinstance(run_count, int):
        raise BatchTooLargeError(run_count, 0)
    params = {
        "environment": environment, "run_count": run_count, "parent_run_id": parent_run_id,
        "idempotency_key": idempotency_key,
    }  # fmt: skip
    row = await _one(conn, "create_batch", params, target)
    batch_id, outcome, retry_after_s, limit = row
    if outcome == "TOO_MANY":
        raise BatchTooLargeError(run_count, int(limit))
    if outcome == "RATE_LIMITED":
        raise BatchRateLimitedError(environment, run_count, retry_after_s)
    return await get_batch(conn, int(batch_id), schema=target)


async def set_batch_limits(
    conn: AsyncConn,
    environment: str,
    *,
    refill_amount: float | None = None,
    refill_interval_s: float | None = None,
    bucket_max: float | None = None,
    concurrency: int | None = None,
    schema: str | None = None,
) -> None:
    """Per-environment overrides of the batch settings (None: the setting's default)."""
    target = schema_name(schema)
    params = {
        "environment": environment, "refill_amount": refill_amount,
        "refill_interval_s": refill_interval_s, "bucket_max": bucket_max,
        "concurrency": concurrency,
    }  # fmt: skip
    # The queue row before the environment's (the global lock order, docs/concurrency.md).
    async with conn.transaction():
        await conn.execute(query("sync_batch_queue_concurrency", target), params)
        await conn.execute(query("set_environment_batch_limits", target), params)
        await conn.execute(query("update_environment_batch_limits", target), params)


async def _max_item_bytes(conn: AsyncConn, schema: str) -> int:
    row = await _one(conn, "batch_item_max_bytes", {}, schema)
    return int(row[0]) if row else 3 * 1024 * 1024


class _Slice:
    def __init__(self) -> None:
        self.indexes: list[int] = []
        self.tasks: list[str] = []
        self.payloads: list[str | None] = []
        self.options: list[str] = []
        self.oversized: list[bool] = []

    def __len__(self) -> int:
        return len(self.indexes)

    def add(self, parsed: ParsedLine, line: int) -> None:
        if isinstance(parsed, OversizedItem):
            self.indexes.append(parsed.index)
            self.tasks.append(parsed.task or "unknown")
            self.payloads.append(None)
            self.options.append("{}")
            self.oversized.append(True)
            return
        try:
            payload = encode_json(parsed.payload)
            options = encode_json(parsed.options, what="options")
        except PayloadError as error:
            raise BatchLineError(line, parsed.index, str(error)) from None
        if "\x00" in parsed.task:
            raise BatchLineError(line, parsed.index, "the task name holds a NUL character")
        self.indexes.append(parsed.index)
        self.tasks.append(parsed.task)
        self.payloads.append(payload)
        self.options.append(options)
        self.oversized.append(False)

    def params(self, batch_id: int) -> dict[str, Any]:
        return {
            "batch_id": batch_id, "indexes": self.indexes, "tasks": self.tasks,
            "payloads": self.payloads, "options": self.options, "oversized": self.oversized,
            "made": None, "refusals": None,
        }  # fmt: skip


class _Ingest:
    """One ingest call: parse, slice, send; remembers where the batch stands."""

    def __init__(
        self, conn: AsyncConn, batch: Batch, schema: str, parser: NdjsonItemParser,
        progress: Progress | None,
    ) -> None:  # fmt: skip
        self.conn = conn
        self.batch = batch
        self.schema = schema
        self.parser = parser
        self.progress = progress
        self.pending = _Slice()
        self.state = IngestResult(
            batch.id, 0, batch.received, batch.run_count, batch.sealed, batch.status
        )

    async def flush(self) -> None:
        if not self.pending:
            return
        sent, self.pending = self.pending, _Slice()
        row = await _one(self.conn, "ingest_batch_items", sent.params(self.batch.id), self.schema)
        if not self.conn.autocommit:
            # Each slice commits: its items and its batch lock go before the next slice's.
            await self.conn.commit()
        if row is None:
            raise BatchNotFoundError(self.batch.id)
        new, received, run_count, sealed, status = row
        if status == "ABORTED":
            raise BatchAbortedError(self.batch.id)
        self.state = IngestResult(
            self.batch.id, self.state.accepted + int(new), int(received), int(run_count),
            bool(sealed), str(status), self.state.oversized + sum(sent.oversized),
            self.parser.lines,
        )  # fmt: skip
        if self.progress is not None:
            self.progress(self.state)

    async def lines(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[tuple[ParsedLine, int]]:
        """Parsed items with their line numbers."""
        parser = self.parser
        async for chunk in chunks:
            for parsed in parser.feed(chunk):
                yield parsed, parser.lines
        for parsed in parser.finish():
            yield parsed, parser.lines

    async def run(self, chunks: AsyncIterable[bytes], slice_items: int) -> IngestResult:
        run_count = self.batch.run_count
        try:
            async for parsed, line in self.lines(chunks):
                if parsed.index >= run_count:
                    raise BatchIndexError(self.batch.id, line, parsed.index, run_count)
                self.pending.add(parsed, line)
                if len(self.pending) >= slice_items:
                    await self.flush()
        except (BatchLineError, BatchIndexError):
            # Everything before the bad line is kept; the caller can resend from there.
            await self.flush()
            raise
        await self.flush()
        return replace(self.state, lines=self.parser.lines)


async def ingest_items(
    conn: AsyncConn,
    batch_id: int,
    chunks: AsyncIterable[bytes],
    *,
    schema: str | None = None,
    slice_items: int = SLICE_ITEMS,
    progress: Progress | None = None,
    first_index: int = 0,
) -> IngestResult:
    """Phase two: NDJSON items from ``chunks`` (bytes, split anywhere).

    An item without an ``index`` takes ``first_index`` plus its position among the items of
    this call: resending a stream from its k-th item, pass ``first_index=k`` (the ``index`` of
    the error that stopped it). Returns where the batch stands; ``sealed`` says all run-count
    items are in. A sealed batch takes nothing more (``accepted`` 0). Raises
    ``BatchLineError`` (bad UTF-8 or JSON, naming line and index), ``BatchIndexError``,
    ``BatchAbortedError`` or ``BatchNotFoundError``; items sent before the error stay in the
    batch. ``BatchOffsetError`` (a bad ``first_index``) and ``BatchTransactionError`` (a
    connection inside a transaction: each slice commits on its own) are raised before anything
    is sent.
    """
    check_first_index(first_index)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise BatchTransactionError(batch_id)
    target = schema_name(schema)
    batch = await get_batch(conn, batch_id, schema=target)
    if batch.status == "ABORTED":
        raise BatchAbortedError(batch_id, (batch.error or {}).get("message"))
    parser = NdjsonItemParser(await _max_item_bytes(conn, target), first_index)
    if not conn.autocommit:
        await conn.commit()  # the reads above: no transaction stays open
    ingest = _Ingest(conn, batch, target, parser, progress)
    if batch.sealed:
        return ingest.state
    return await ingest.run(chunks, slice_items)


async def file_chunks(
    path: str | Path, chunk_bytes: int = FILE_CHUNK_BYTES
) -> AsyncIterator[bytes]:
    """A file's bytes in chunks, read without blocking the event loop."""
    async with await anyio.open_file(path, "rb") as handle:
        while chunk := await handle.read(chunk_bytes):
            yield chunk


async def ingest_file(
    conn: AsyncConn, batch_id: int, path: str | Path, *, schema: str | None = None,
    progress: Progress | None = None, first_index: int = 0,
) -> IngestResult:  # fmt: skip
    return await ingest_items(
        conn, batch_id, file_chunks(path), schema=schema, progress=progress,
        first_index=first_index,
    )  # fmt: skip


def count_items(path: str | Path) -> int:
    """Non-blank lines of an NDJSON file: its run count when every line is an item."""
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
    return count


class BatchClient:
    """Batches through one autocommit connection, opened on first use."""

    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self.dsn = psycopg_dsn(database_url(dsn))
        self.schema = schema_name(schema)
        self._conn: AsyncConn | None = None
        self._lock = anyio.Lock()

    async def _connection(self) -> AsyncConn:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
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

    async def items(
        self, batch_id: int
    ) -> list[tuple[int, str, int | None, dict[str, Any] | None]]:
        async with self._lock:
            return await batch_items(await self._connection(), batch_id, schema=self.schema)

    async def set_limits(self, environment: str, **limits: Any) -> None:
        async with self._lock:
            await set_batch_limits(
                await self._connection(), environment, schema=self.schema, **limits
            )

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> BatchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
