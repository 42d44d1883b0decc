"""Which index an item gets: an oversized line's own, and ``first_index`` for items without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairlane.batches import AsyncBatchClient
from fairlane.cli import main as cli_main
from fairlane.errors import BatchLineError, BatchOffsetError
from tests.helpers import running, wait_until
from tests.helpers.batches import batch_done, batch_row, batch_runs, chunked, ndjson, set_setting
from tests.helpers.batches import worker as batch_worker

pytestmark = pytest.mark.anyio


async def test_an_index_nested_in_an_oversized_payload_takes_no_other_items_place(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    set_setting(db, "batch_item_max_bytes", 200)
    items = [
        {"task": "echo", "payload": {"index": 1, "blob": "x" * 500}, "index": 0},
        {"task": "echo", "payload": 1, "index": 1},
        {"task": "echo", "payload": 2, "index": 2},
    ]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 3)
        result = await batches.ingest(batch.id, chunked(ndjson(items), 64))
        assert (result.accepted, result.received, result.sealed, result.oversized) == (
            3,
            3,
            True,
            1,
        )
        async with running(batch_worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
    state = batch_row(db, batch.id)
    assert (state["status"], state["succeeded"], state["failed"]) == ("PARTIAL_FAILED", 2, 1)
    runs = batch_runs(db, batch.id)
    assert runs[0][0] == "SYSTEM_FAILURE"
    assert runs[0][2]["code"] == "PAYLOAD_TOO_LARGE"
    assert (runs[1][1], runs[2][1]) == (1, 2)


async def test_a_stream_without_indexes_resumes_from_first_index(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    lines = ndjson([{"task": "echo", "payload": i} for i in range(6)]).splitlines(keepends=True)
    broken = b"".join(lines[:2]) + b'{"task": "echo", "payload": \n' + b"".join(lines[3:])
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 6)
        with pytest.raises(BatchLineError) as bad:
            await batches.ingest(batch.id, chunked(broken, 10))
        assert bad.value.index == 2
        # The rest of the stream, from the bad item on, numbered from where it stopped.
        rest = b"".join(lines[2:])
        resumed = await batches.ingest(batch.id, chunked(rest, 10), first_index=bad.value.index)
        assert (resumed.accepted, resumed.received, resumed.sealed) == (4, 6, True)
        async with running(batch_worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
    assert {i: run[1] for i, run in batch_runs(db, batch.id).items()} == {i: i for i in range(6)}


async def test_a_bad_first_index_is_refused_before_anything_is_sent(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 2)
        with pytest.raises(BatchOffsetError):
            await batches.ingest(batch.id, chunked(ndjson([{"task": "echo"}]), 10), first_index=-1)
    assert batch_row(db, batch.id)["sealed"] is False
    assert db.execute("SELECT count(*) FROM fairlane.batch_items").fetchone() == (0,)


def test_cli_resends_the_rest_of_a_file_with_first_index(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head, tail = tmp_path / "head.ndjson", tmp_path / "tail.ndjson"
    head.write_bytes(ndjson([{"task": "echo", "payload": i} for i in range(3)]))
    tail.write_bytes(ndjson([{"task": "echo", "payload": i} for i in range(3, 5)]))
    assert (
        cli_main(["batch", "ingest", str(head), "--env", "cli", "--count", "5", "--dsn", dsn]) == 0
    )
    started = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (started["received"], started["sealed"]) == (3, False)
    resend = ["batch", "ingest", str(tail), "--batch", str(started["id"]), "--dsn", dsn]
    assert cli_main([*resend, "--first-index", "3"]) == 0
    finished = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (finished["received"], finished["sealed"]) == (5, True)
    payloads = db.execute(
        "SELECT index, payload FROM fairlane.batch_items WHERE batch_id = %s ORDER BY index",
        (started["id"],),
    ).fetchall()
    assert payloads == [(i, i) for i in range(5)]
    assert cli_main([*resend, "--first-index", "-1"]) == 2
    assert "first_index" in capsys.readouterr().err
