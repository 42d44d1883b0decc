"""Batch triggers, phase two: ``ingest_items_async`` streams NDJSON bytes in chunks into a
batch.

Each slice of parsed items is one statement, committed on its own, so a bad line
(``BatchLineError``, ``BatchIndexError``) leaves everything before it in the batch and the
batch open: resend from anywhere, items are deduplicated by index. Items without an index are
numbered from the call's ``first_index`` (default 0), so a resend of a stream from its k-th
item passes ``first_index=k``; the errors' ``index`` is that number for the bad line. The batch
seals when all run-count items are in; the worker's built-in ``fairlane.batch_item`` task then
turns each into its run (``fairlane.batches.processing``).

``ingest_items_async`` runs on one connection the caller holds; ``ingest_stream`` takes a
connection (from a pool, say) only to write a slice and gives it back at once, so a stream
that waits on its network holds none: what a server that reads uploads from many clients
needs. Either
ends a stream that sends nothing for ``idle_timeout_s`` seconds (``BatchStreamIdleError``),
after storing its complete lines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg.pq import TransactionStatus

from fairlane.batches.api import get_batch_async, item_max_bytes, renamed
from fairlane.batches.ndjson import NdjsonItemParser, OversizedItem, ParsedLine, check_first_index
from fairlane.config import schema_name
from fairlane.engine import engine
from fairlane.engine.batches import ItemColumns
from fairlane.engine.statement import first_async
from fairlane.errors import (
    BatchAbortedError,
    BatchIndexError,
    BatchLineError,
    BatchNotFoundError,
    BatchStreamIdleError,
    BatchTransactionError,
    PayloadError,
)
from fairlane.models import Batch, IngestResult
from fairlane.payload import encode_json

AsyncConn = psycopg.AsyncConnection[Any]
# Parsed items sent per statement: at most this many, and no more payload bytes than
# SLICE_BYTES past one item (a slice and the one in flight are what an ingest holds).
SLICE_ITEMS = 1000
SLICE_BYTES = 1024 * 1024
FILE_CHUNK_BYTES = 256 * 1024
NO_OPTIONS = "{}"
Progress = Callable[[IngestResult], None]
# A connection for one short use, given back when the block ends (``pool.connection``).
Connect = Callable[[], AbstractAsyncContextManager[AsyncConn]]


class _Idle(Exception):
    """The stream sent nothing within the idle timeout (raised between chunks)."""


class _Slice:
    def __init__(self) -> None:
        self.indexes: list[int] = []
        self.tasks: list[str] = []
        self.payloads: list[str | None] = []
        self.options: list[str] = []
        self.oversized: list[bool] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.indexes)

    def full(self, items: int) -> bool:
        return len(self.indexes) >= items or self.bytes >= SLICE_BYTES

    def add(self, parsed: ParsedLine, line: int) -> None:
        if isinstance(parsed, OversizedItem):
            self.indexes.append(parsed.index)
            self.tasks.append(parsed.task or "unknown")
            self.payloads.append(None)
            self.options.append(NO_OPTIONS)
            self.oversized.append(True)
            return
        try:
            payload = encode_json(parsed.payload)
            options = encode_json(parsed.options, what="options") if parsed.options else NO_OPTIONS
        except PayloadError as error:
            raise BatchLineError(line, parsed.index, str(error)) from None
        if "\x00" in parsed.task:
            raise BatchLineError(line, parsed.index, "the task name holds a NUL character")
        self.indexes.append(parsed.index)
        self.tasks.append(parsed.task)
        self.payloads.append(payload)
        self.options.append(options)
        self.oversized.append(False)
        self.bytes += len(payload) + len(options)

    def columns(self, batch_id: int) -> ItemColumns:
        return ItemColumns(
            batch_id, self.indexes, self.tasks, self.payloads, self.options, self.oversized
        )


class _Ingest:
    """One ingest call: parse, slice, send; remembers where the batch stands.

    One slice is in flight while the next is parsed: the database stores a slice while this
    process reads and checks the lines of the next one, and at most two slices are held. The
    slices still go one after the other, each committed before the next is sent, and their
    results are taken in order.
    """

    def __init__(
        self,
        connect: Connect,
        batch: Batch,
        schema: str,
        parser: NdjsonItemParser,
        progress: Progress | None,
        idle_timeout_s: float | None,
    ) -> None:
        self.connect = connect
        self.batch = batch
        self.schema = schema
        self.parser = parser
        self.progress = progress
        self.idle_timeout_s = idle_timeout_s
        self.pending = _Slice()
        self.in_flight: asyncio.Task[None] | None = None
        self.state = IngestResult(
            batch.id, 0, batch.received, batch.run_count, batch.sealed, batch.status
        )

    async def _send(self, sent: _Slice, lines: int) -> None:
        statement = engine(self.schema).batches.ingest(sent.columns(self.batch.id))
        async with self.connect() as conn:
            row = await first_async(conn, statement)
            if not conn.autocommit:
                # Each slice commits: its items and its batch lock go before the next slice's.
                await conn.commit()
        if row is None:
            raise BatchNotFoundError(self.batch.id)
        if row.status == "ABORTED":
            raise BatchAbortedError(self.batch.id)
        self.state = IngestResult(
            self.batch.id,
            self.state.accepted + row.accepted,
            row.received,
            row.run_count,
            row.sealed,
            row.status,
            self.state.oversized + sum(sent.oversized),
            lines,
        )
        if self.progress is not None:
            self.progress(self.state)

    async def settle(self) -> None:
        """Wait for the slice in flight; its errors are raised here."""
        if self.in_flight is not None:
            in_flight, self.in_flight = self.in_flight, None
            await in_flight

    async def flush(self) -> None:
        """Send the pending slice once the one before it is stored."""
        await self.settle()
        if not self.pending:
            return
        sent, self.pending = self.pending, _Slice()
        self.in_flight = asyncio.ensure_future(self._send(sent, self.parser.lines))
        # Let it send its statement now: the chunks may come without this call ever waiting.
        await asyncio.sleep(0)

    async def abandon(self) -> None:
        """After an unexpected error (a broken stream, a cancelled request): stop the slice in
        flight and wait until it has stopped, so the connection is free again."""
        if self.in_flight is not None:
            in_flight, self.in_flight = self.in_flight, None
            in_flight.cancel()
            with anyio.CancelScope(shield=True), suppress(BaseException):
                await in_flight

    async def _next_chunk(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The next chunk, None at the end; ``_Idle`` when none comes in time. Only the wait
        on the stream is timed, never the wait for a slice to be stored."""
        with anyio.move_on_after(self.idle_timeout_s):
            try:
                return await anext(chunks)
            except StopAsyncIteration:
                return None
        raise _Idle

    async def lines(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[tuple[ParsedLine, int]]:
        """Parsed items with their line numbers."""
        parser = self.parser
        stream = aiter(chunks)
        while (chunk := await self._next_chunk(stream)) is not None:
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
                if self.pending.full(slice_items):
                    await self.flush()
            await self.flush()
            await self.settle()
        except (BatchLineError, BatchIndexError):
            # Everything before the bad line is kept; the caller can resend from there.
            await self.flush()
            await self.settle()
            raise
        except _Idle:
            # As for a bad line: the complete lines are kept, a partial one is dropped.
            await self.flush()
            await self.settle()
            raise self._idle_error() from None
        finally:
            await self.abandon()
        return replace(self.state, lines=self.parser.lines)

    def _idle_error(self) -> BatchStreamIdleError:
        assert self.idle_timeout_s is not None
        return BatchStreamIdleError(
            self.batch.id,
            self.idle_timeout_s,
            accepted=self.state.accepted,
            received=self.state.received,
            index=self.parser.first_index + self.parser.items,
        )


async def ingest_items_async(
    conn: AsyncConn,
    batch_id: int,
    chunks: AsyncIterable[bytes],
    *,
    schema: str | None = None,
    slice_items: int = SLICE_ITEMS,
    progress: Progress | None = None,
    first_index: int = 0,
    idle_timeout_s: float | None = None,
) -> IngestResult:
    """Phase two: NDJSON items from ``chunks`` (bytes, split anywhere).

    An item without an ``index`` takes ``first_index`` plus its position among the items of
    this call: resending a stream from its k-th item, pass ``first_index=k`` (the ``index`` of
    the error that stopped it). Returns where the batch stands; ``sealed`` says all run-count
    items are in. A sealed batch takes nothing more (``accepted`` 0). Raises
    ``BatchLineError`` (bad UTF-8 or JSON, naming line and index), ``BatchIndexError``,
    ``BatchAbortedError``, ``BatchNotFoundError`` or, when ``chunks`` sends nothing for
    ``idle_timeout_s`` seconds (default: no limit), ``BatchStreamIdleError``; items sent before
    the error stay in the batch. ``BatchOffsetError`` (a bad ``first_index``) and
    ``BatchTransactionError`` (a connection inside a transaction: each slice commits on its
    own) are raised before anything is sent.
    """
    check_first_index(first_index)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise BatchTransactionError(batch_id)

    @asynccontextmanager
    async def same() -> AsyncIterator[AsyncConn]:
        yield conn

    return await ingest_stream(
        same,
        batch_id,
        chunks,
        schema=schema,
        slice_items=slice_items,
        progress=progress,
        first_index=first_index,
        idle_timeout_s=idle_timeout_s,
    )


async def ingest_stream(
    connect: Connect,
    batch_id: int,
    chunks: AsyncIterable[bytes],
    *,
    schema: str | None = None,
    slice_items: int = SLICE_ITEMS,
    progress: Progress | None = None,
    first_index: int = 0,
    idle_timeout_s: float | None = None,
) -> IngestResult:
    """``ingest_items_async`` with a connection taken from ``connect()`` (``pool.connection``, say)
    for each statement and given back at once: none is held while ``chunks`` waits on its
    network, and at most one while a slice is stored. Connections outside a transaction."""
    check_first_index(first_index)
    target = schema_name(schema)
    async with connect() as conn:
        batch = await get_batch_async(conn, batch_id, schema=target)
        if batch.status == "ABORTED":
            raise BatchAbortedError(batch_id, (batch.error or {}).get("message"))
        max_bytes = await item_max_bytes(conn, target)
        if not conn.autocommit:
            await conn.commit()  # the reads above: no transaction stays open
    parser = NdjsonItemParser(max_bytes, first_index)
    ingest = _Ingest(connect, batch, target, parser, progress, idle_timeout_s)
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


async def ingest_file_async(
    conn: AsyncConn,
    batch_id: int,
    path: str | Path,
    *,
    schema: str | None = None,
    progress: Progress | None = None,
    first_index: int = 0,
) -> IngestResult:
    return await ingest_items_async(
        conn,
        batch_id,
        file_chunks(path),
        schema=schema,
        progress=progress,
        first_index=first_index,
    )


def count_items(path: str | Path) -> int:
    """Non-blank lines of an NDJSON file: its run count when every line is an item."""
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                count += 1
    return count


# The names before the naming convention, for one more release (fairlane.batches.api).
ingest_items = renamed(ingest_items_async, "ingest_items")
ingest_file = renamed(ingest_file_async, "ingest_file")
