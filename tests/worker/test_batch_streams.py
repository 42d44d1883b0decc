"""Item streams that wait on their sender: ``ingest_stream`` holds a pooled connection only
while it stores a slice, and a stream idle past ``idle_timeout_s`` ends with its complete
lines stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from fairlane.batches import AsyncBatchClient
from fairlane.batches.ingest import ingest_items_async, ingest_stream
from fairlane.errors import BatchStreamIdleError
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_done, batch_row, batch_runs, chunked, ndjson, worker

pytestmark = pytest.mark.anyio


def _received(db: psycopg.Connection[Any], batch_id: int) -> int:
    row = db.execute("SELECT received FROM fairlane.batches WHERE id = %s", (batch_id,)).fetchone()
    assert row is not None
    return int(row[0])


async def _then_wait(data: bytes, go_on: anyio.Event, rest: bytes = b"") -> AsyncIterator[bytes]:
    """``data``, then nothing until ``go_on`` is set, then ``rest``."""
    yield data
    await go_on.wait()
    if rest:
        yield rest


async def test_a_pooled_stream_holds_no_connection_while_it_waits(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "echo", "payload": i} for i in range(4)]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 4)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    go_on = anyio.Event()
    results = []
    try:
        async with anyio.create_task_group() as group:

            async def send() -> None:
                stream = _then_wait(ndjson(items[:2]), go_on, ndjson(items[2:]))
                results.append(
                    await ingest_stream(pool.connection, batch.id, stream, slice_items=2)
                )

            group.start_soon(send)
            await wait_until(lambda: _received(db, batch.id) == 2, what="the first slice")
            # The stream waits on its sender; the pool's one connection is free meanwhile.
            async with pool.connection(timeout=2) as conn:
                await conn.execute("SELECT 1")
            go_on.set()
    finally:
        await pool.close()
    assert (results[0].accepted, results[0].received, results[0].sealed) == (4, 4, True)


async def test_streams_racing_through_a_pool_store_each_item_once(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    count = 60
    data = ndjson([{"task": "echo", "payload": i} for i in range(count)])
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", count)
    accepted: list[int] = []
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:

        async def send(size: int) -> None:
            result = await ingest_stream(
                pool.connection, batch.id, chunked(data, size), slice_items=7
            )
            accepted.append(result.accepted)

        async with anyio.create_task_group() as group:
            for size in (13, 29, 61):
                group.start_soon(send, size)
    assert sum(accepted) == count
    async with running(worker(dsn)):
        await wait_until(lambda: batch_done(db, batch.id), what="batch done")
    assert batch_row(db, batch.id)["status"] == "COMPLETED"
    assert {i: run[1] for i, run in batch_runs(db, batch.id).items()} == {
        i: i for i in range(count)
    }


async def test_an_idle_stream_ends_and_keeps_its_complete_lines(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "echo", "payload": i} for i in range(5)]
    never = anyio.Event()
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 5)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        stalled = _then_wait(ndjson(items[:2]) + b'{"task": "echo", "pay', never)
        with anyio.fail_after(20), pytest.raises(BatchStreamIdleError) as idle:
            await ingest_items_async(conn, batch.id, stalled, idle_timeout_s=0.3)
        error = idle.value
        assert (error.accepted, error.received, error.index, error.idle_timeout_s) == (2, 2, 2, 0.3)
        assert _received(db, batch.id) == 2
        # The rest, from where the error says: the batch completes, each item once.
        rest = chunked(ndjson(items[error.index :]), 7)
        result = await ingest_items_async(conn, batch.id, rest, first_index=error.index)
        assert (result.accepted, result.sealed) == (3, True)
    async with running(worker(dsn)):
        await wait_until(lambda: batch_done(db, batch.id), what="batch done")
    assert {i: run[1] for i, run in batch_runs(db, batch.id).items()} == {i: i for i in range(5)}
