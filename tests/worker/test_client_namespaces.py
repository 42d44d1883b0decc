"""The namespaces of both clients: ``client.limits``, ``client.schedules``, ``client.tokens``
and ``client.batches``, on the client's connections, read back from the database."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane import AsyncClient, Client
from fairlane.errors import ScheduleNotFoundError, WaitpointNotFoundError
from tests.helpers import poll
from tests.helpers.batches import chunked, ndjson


def _queue_cap(db: psycopg.Connection[Any], environment: str, queue: str) -> Any:
    row = db.execute(
        "SELECT concurrency_limit, paused FROM fairlane.queues"
        " WHERE environment = %s AND name = %s",
        (environment, queue),
    ).fetchone()
    return tuple(row) if row else None


def _run_of(db: psycopg.Connection[Any], run_id: int) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT task, environment, metadata ->> 'schedule' FROM fairlane.runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_sync_limits(dsn: str, db: psycopg.Connection[Any]) -> None:
    with Client(dsn) as client:
        env = client.limits.set_environment("acme", concurrency_limit=3, paused=True)
        queue = client.limits.set_queue("acme", "mail", concurrency_limit=2)
        settings = client.limits.set_scheduler(quantum=7)
        assert (env.concurrency_limit, env.paused) == (3, True)
        assert (queue.environment, queue.name, queue.concurrency_limit) == ("acme", "mail", 2)
        assert client.limits.scheduler_settings().quantum == settings.quantum == 7
        table = client.limits.table()
    assert _queue_cap(db, "acme", "mail") == (2, False)
    assert any(row["environment"] == "acme" and row["queue"] == "mail" for row in table)


@pytest.mark.anyio
async def test_async_limits(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        env = await client.limits.set_environment("acme", size_limit=10)
        await client.limits.set_queue("acme", "mail", paused=True)
        await client.limits.set_scheduler(max_deficit=9)
        assert env.size_limit == 10
        assert (await client.limits.scheduler_settings()).max_deficit == 9
        table = await client.limits.table()
    assert _queue_cap(db, "acme", "mail") == (None, True)
    assert any(row["environment"] == "acme" and row["queue"] == "mail" for row in table)


def test_sync_schedules(dsn: str, db: psycopg.Connection[Any]) -> None:
    with Client(dsn) as client:
        made = client.schedules.create(
            "report", "*/5 * * * *", external_id="c1", payload={"n": 1}, environment="acme"
        )
        assert client.schedules.get("c1", environment="acme") == made
        assert [s.key for s in client.schedules.list(environment="acme")] == ["c1"]
        assert client.schedules.pause("c1", environment="acme").paused
        assert not client.schedules.resume("c1", environment="acme").paused
        run_id = client.schedules.trigger("c1", environment="acme")
        client.schedules.delete("c1", environment="acme")
        with pytest.raises(ScheduleNotFoundError):
            client.schedules.get("c1", environment="acme")
    assert _run_of(db, run_id) == ("report", "acme", "c1")


@pytest.mark.anyio
async def test_async_schedules(dsn: str, db: psycopg.Connection[Any]) -> None:
    async with AsyncClient(dsn) as client:
        made = await client.schedules.create("report", "0 * * * *", external_id="c2")
        assert (await client.schedules.get("c2")) == made
        assert [s.key for s in await client.schedules.list()] == ["c2"]
        assert (await client.schedules.pause("c2")).paused
        assert not (await client.schedules.resume("c2")).paused
        run_id = await client.schedules.trigger("c2")
        await client.schedules.delete("c2")
        assert await client.schedules.list() == []
    assert _run_of(db, run_id) == ("report", "default", "c2")


def test_sync_tokens(dsn: str) -> None:
    with Client(dsn) as client:
        token_id = client.tokens.create(idempotency_key="k", timeout="1h")
        assert client.tokens.create(idempotency_key="k") == token_id
        assert client.tokens.get(token_id).status == "PENDING"
        assert client.tokens.complete(token_id, {"ok": True})
        assert not client.tokens.complete(token_id)
        token = client.tokens.get(token_id)
        with pytest.raises(WaitpointNotFoundError):
            client.tokens.get(token_id + 1000)
    assert (token.status, token.output) == ("COMPLETED", {"ok": True})


@pytest.mark.anyio
async def test_async_tokens(dsn: str) -> None:
    async with AsyncClient(dsn) as client:
        token_id = await client.tokens.create()
        assert await client.tokens.complete(token_id, [1, 2])
        token = await client.tokens.get(token_id)
    assert (token.status, token.output) == ("COMPLETED", [1, 2])


def test_sync_batches(dsn: str, db: psycopg.Connection[Any]) -> None:
    data = ndjson([{"task": "echo", "payload": i} for i in range(5)])
    with Client(dsn) as client:
        client.batches.set_limits("acme", bucket_max=100)
        batch = client.batches.create("acme", 5)
        # Any iterable of bytes, cut anywhere.
        result = client.batches.ingest(batch.id, (data[i : i + 7] for i in range(0, len(data), 7)))
        assert (result.accepted, result.sealed) == (5, True)
        assert client.batches.get(batch.id).sealed
        assert [item.index for item in client.batches.items(batch.id)] == [0, 1, 2, 3, 4]
    row = db.execute(
        "SELECT batch_bucket_max FROM fairlane.environments WHERE name = 'acme'"
    ).fetchone()
    assert row is not None
    assert row[0] == 100


@pytest.mark.anyio
async def test_async_batches(dsn: str) -> None:
    data = ndjson([{"task": "echo", "payload": i} for i in range(3)])
    async with AsyncClient(dsn) as client:
        batch = await client.batches.create("default", 3)
        result = await client.batches.ingest(batch.id, chunked(data, 10))
        assert (result.accepted, result.sealed) == (3, True)
        assert len(await client.batches.items(batch.id)) == 3


def test_closing_a_client_closes_its_batches_connection(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    def batch_backends() -> int:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'fairlane batches'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    client = Client(dsn)
    client.batches.create("default", 1)
    loop = client.batches._loop
    assert loop is not None
    assert loop.thread.is_alive()
    assert batch_backends() == 1
    client.close()
    assert not loop.thread.is_alive()
    poll(lambda: batch_backends() == 0, within=10, what="the batches connection closed")


@pytest.mark.anyio
async def test_batch_functions_old_names_warn_and_work(dsn: str) -> None:
    from fairlane.batches import api, ingest

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.warns(DeprecationWarning, match="create_batch is now create_batch_async"):
            batch = await api.create_batch(conn, "default", 1)
        with pytest.warns(DeprecationWarning, match="ingest_items is now ingest_items_async"):
            result = await ingest.ingest_items(conn, batch.id, chunked(ndjson([{"task": "t"}]), 4))
        with pytest.warns(DeprecationWarning, match="get_batch is now get_batch_async"):
            assert (await api.get_batch(conn, batch.id)).sealed
    assert result.accepted == 1
