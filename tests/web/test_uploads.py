"""Streamed uploads against a real ``fairlane serve`` and a real worker, sent as an attacker
would: uploads that send part of a line and then nothing. They hold no database connection
while they wait, an idle one is ended with what it sent stored, and an environment's
concurrent uploads are capped."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from anyio.abc import SocketStream

from fairlane import RunContext, TaskRegistry
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_row, batch_runs, worker
from tests.helpers.uploads import (
    PARTIAL_LINE,
    SLICE_FILLING_PAYLOAD,
    Server,
    bearer,
    create_batch,
    lines,
    logged_errors,
    read_answer,
    served,
    start_upload,
)
from tests.web.conftest import Keys

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# More stalled uploads than the server's pool has connections (its default, 10).
STALLED = 10
# Bounds an answer that must not wait on a connection (the pool waits 10 s, then 503).
ANSWERED_WITHIN_S = 5.0


def registry() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    @tasks.task("sink")
    async def sink(ctx: RunContext, payload: Any) -> None:
        return None

    return tasks


def stored(db: psycopg.Connection[Any], batch_id: int) -> int:
    row = db.execute("SELECT received FROM fairlane.batches WHERE id = %s", (batch_id,)).fetchone()
    assert row is not None
    return int(row[0])


async def stall(
    server: Server, key: str, batch_id: int, db: psycopg.Connection[Any]
) -> SocketStream:
    """An upload that stores one item, sends half of the next line and then nothing; back once
    the server has stored the item (the upload is in, waiting on its client)."""
    body = lines([{"task": "sink", "payload": SLICE_FILLING_PAYLOAD}]) + PARTIAL_LINE
    stream = await start_upload(server, key, batch_id, body)
    await wait_until(lambda: stored(db, batch_id) == 1, what=f"batch {batch_id}'s first item")
    return stream


async def test_stalled_uploads_leave_every_environment_answered(
    dsn: str, db: psycopg.Connection[Any], keys: Keys, tmp_path: Path
) -> None:
    options = ("--uploads-per-environment", str(STALLED + 2))
    with served(dsn, tmp_path, *options) as server:
        async with (
            httpx.AsyncClient(base_url=server.base, timeout=ANSWERED_WITHIN_S) as client,
            AsyncExitStack() as stalled,
        ):
            for _ in range(STALLED):
                stream = await stall(server, keys.a, await create_batch(client, keys.a, 2), db)
                stalled.push_async_callback(stream.aclose)
            # Ten uploads of A wait on their network; requests of A and of B still get their
            # answers (not the pool's 503 after 10 s), another upload of each included.
            triggered = {key: await _answered(client, key) for key in (keys.a, keys.b)}
            async with running(worker(dsn, registry())):
                for run_id in triggered.values():
                    await wait_until(
                        lambda run_id=run_id: _status(db, run_id) == "COMPLETED",
                        what=f"run {run_id}",
                    )


async def _answered(client: httpx.AsyncClient, key: str) -> int:
    """A trigger, a listing and a whole upload of ``key``, each answered; the run's id."""
    run = await client.post(
        "/api/v1/tasks/echo/trigger", json={"payload": "ping"}, headers=bearer(key)
    )
    assert run.status_code == 200, run.text
    listed = await client.get("/api/v1/runs", headers=bearer(key))
    assert listed.status_code == 200, listed.text
    batch_id = await create_batch(client, key, 2)
    upload = await client.post(
        f"/api/v1/batches/{batch_id}/items",
        headers=bearer(key),
        content=lines([{"task": "echo", "payload": i} for i in range(2)]),
    )
    assert upload.status_code == 200, upload.text
    assert upload.json()["sealed"] is True
    return int(run.json()["id"])


def _status(db: psycopg.Connection[Any], run_id: int) -> str:
    row = db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


async def test_an_idle_upload_ends_with_408_and_keeps_what_it_stored(
    dsn: str, db: psycopg.Connection[Any], keys: Keys, tmp_path: Path
) -> None:
    with served(dsn, tmp_path, "--upload-idle-timeout", "2") as server:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            batch_id = await create_batch(client, keys.a, 5)
            first = lines([{"task": "echo", "payload": i} for i in range(2)])
            async with await start_upload(server, keys.a, batch_id, first + PARTIAL_LINE) as stream:
                with anyio.fail_after(30):
                    status, answer = await read_answer(stream)
            assert status == 408, answer
            error = answer["error"]
            assert error["type"] == "BatchStreamIdleError"
            assert (error["accepted"], error["received"], error["index"]) == (2, 2, 2)
            assert "2 items" in error["message"]
            assert "first_index=2" in error["message"]
            theirs = await client.get(f"/api/v1/batches/{batch_id}", headers=bearer(keys.b))
            assert theirs.status_code == 404
            kept = await client.get(f"/api/v1/batches/{batch_id}", headers=bearer(keys.a))
            assert (kept.json()["received"], kept.json()["status"]) == (2, "PENDING")
            await _slow_but_steady(client, keys.a, batch_id)
        async with running(worker(dsn, registry())):
            await wait_until(lambda: batch_row(db, batch_id)["status"] == "COMPLETED")
    payloads = {index: run[1] for index, run in batch_runs(db, batch_id).items()}
    assert payloads == {i: i for i in range(5)}


async def _slow_but_steady(client: httpx.AsyncClient, key: str, batch_id: int) -> None:
    """The timeout is on each wait for data, not on the whole upload: the rest of the batch,
    sent a few bytes at a time for longer than the timeout, is taken."""

    async def slowly() -> AsyncIterator[bytes]:
        data = lines([{"task": "echo", "payload": i} for i in range(2, 5)])
        for start in range(0, len(data), 4):
            yield data[start : start + 4]
            await anyio.sleep(0.1)

    started = time.monotonic()
    rest = await client.post(
        f"/api/v1/batches/{batch_id}/items?first_index=2", content=slowly(), headers=bearer(key)
    )
    assert time.monotonic() - started > 2
    assert rest.status_code == 200, rest.text
    assert (rest.json()["accepted"], rest.json()["sealed"]) == (3, True)


async def test_uploads_past_the_environments_cap_get_429(
    dsn: str, db: psycopg.Connection[Any], keys: Keys, tmp_path: Path
) -> None:
    with served(dsn, tmp_path, "--uploads-per-environment", "2") as server:
        async with (
            httpx.AsyncClient(base_url=server.base, timeout=ANSWERED_WITHIN_S) as client,
            AsyncExitStack() as stalled,
        ):
            for _ in range(2):
                stream = await stall(server, keys.a, await create_batch(client, keys.a, 2), db)
                stalled.push_async_callback(stream.aclose)
            batch_id = await create_batch(client, keys.a, 2)
            path = f"/api/v1/batches/{batch_id}/items"
            body = lines([{"task": "echo", "payload": i} for i in range(2)])
            refused = await client.post(path, content=body, headers=bearer(keys.a))
            assert refused.status_code == 429, refused.text
            assert refused.headers["Retry-After"] == "1"
            error = refused.json()["error"]
            assert error["type"] == "TooManyUploads"
            assert (error["environment"], error["limit"]) == ("env-a", 2)
            # The cap is the batch's environment's, whoever sends: an admin key's too.
            as_admin = await client.post(path, content=body, headers=bearer(keys.admin))
            assert as_admin.status_code == 429, as_admin.text
            assert stored(db, batch_id) == 0
            # B has places of its own.
            await _answered(client, keys.b)
            # An upload that ends gives its place back.
            await stream.aclose()

            async def taken() -> bool:
                answer = await client.post(path, content=body, headers=bearer(keys.a))
                assert answer.status_code in (200, 429), answer.text
                return answer.status_code == 200

            await wait_until(taken, what="the place of the closed upload")
            # A client that gave up is not a server failure.
            assert logged_errors(server) == []
        async with running(worker(dsn, registry())):
            await wait_until(lambda: batch_row(db, batch_id)["status"] == "COMPLETED")
