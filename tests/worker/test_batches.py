"""Batch triggers: two-phase creation, streamed NDJSON items, pre-failed items, processing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg.pq import TransactionStatus

from fairlane import AsyncClient, RunContext, TaskRegistry
from fairlane.batches import AsyncBatchClient
from fairlane.batches.ingest import ingest_items_async
from fairlane.batches.processing import BATCH_ITEM_TASK, BatchItemProcessor
from fairlane.cli import main as cli_main
from fairlane.errors import (
    BatchAbortedError,
    BatchIndexError,
    BatchLineError,
    BatchRateLimitedError,
    BatchTooLargeError,
    BatchTransactionError,
)
from fairlane.models import IngestResult
from tests.helpers import running, wait_until
from tests.helpers.batches import (
    abort_now,
    batch_done,
    batch_row,
    batch_runs,
    chunked,
    ndjson,
    set_setting,
    status_is,
    tasks,
    worker,
)

pytestmark = pytest.mark.anyio


# -- phase one ---------------------------------------------------------------------------


async def test_create_charges_the_bucket_and_refuses_with_time_to_retry(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncBatchClient(dsn) as batches:
        await batches.set_limits("tight", refill_amount=10, refill_interval_s=10, bucket_max=20)
        first = await batches.create("tight", 15)
        assert (first.status, first.sealed, first.run_count) == ("PENDING", False, 15)
        with pytest.raises(BatchRateLimitedError) as refused:
            await batches.create("tight", 10)
        # 5 tokens left, 5 missing at 10 per 10 s: about 5 s.
        assert refused.value.retry_after_s is not None
        assert 4.0 < refused.value.retry_after_s <= 5.0
        # Another environment has its own bucket, with the defaults (100 / 10 s, max 1,200).
        await batches.create("other", 1000)
        with pytest.raises(BatchRateLimitedError):
            await batches.create("other", 300)
        # The same idempotency key returns the batch, uncharged.
        keyed = await batches.create("other", 100, idempotency_key="k")
        again = await batches.create("other", 100, idempotency_key="k")
        assert again.id == keyed.id
        with pytest.raises(BatchTooLargeError):
            await batches.create("other", 1001)
        set_setting(db, "batch_max_items", 5)
        with pytest.raises(BatchTooLargeError):
            await batches.create("tight", 6)


# -- phase two ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 64, 100_000])
async def test_items_stream_in_chunks_oversized_lines_are_pre_failed(
    dsn: str, db: psycopg.Connection[Any], chunk: int
) -> None:
    set_setting(db, "batch_item_max_bytes", 200)
    items = [{"task": "echo", "payload": {"n": i}, "index": i} for i in range(6)]
    lines = ndjson(items[:2]) + b"\n  \n"
    big = {"task": "echo", "index": 2, "payload": "x" * 1000}
    lines += json.dumps(big).encode() + b"\n" + ndjson(items[3:])
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 6)
        result = await batches.ingest(batch.id, chunked(lines, chunk))
        assert (result.accepted, result.received, result.sealed, result.oversized) == (
            6,
            6,
            True,
            1,
        )
        # Sealed: a resend takes nothing.
        again = await batches.ingest(batch.id, chunked(lines, chunk))
        assert again.accepted == 0
        assert again.sealed
        async with running(worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
        state = batch_row(db, batch.id)
        assert state == {
            "status": "PARTIAL_FAILED",
            "sealed": True,
            "succeeded": 5,
            "failed": 1,
            "run_count": 6,
        }
        runs = batch_runs(db, batch.id)
        assert sorted(runs) == list(range(6))
        assert runs[2][0] == "SYSTEM_FAILURE"
        assert runs[2][2]["code"] == "PAYLOAD_TOO_LARGE"
        for index in (0, 1, 3, 4, 5):
            assert runs[index][1] == {"n": index}


async def test_a_bad_line_keeps_what_came_before_and_a_resend_completes(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "echo", "payload": i} for i in range(5)]
    good = ndjson(items)
    broken = ndjson(items[:2]) + b'{"task": "echo", "payload": \n' + ndjson(items[3:])
    progress: list[IngestResult] = []
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 5)
        with pytest.raises(BatchLineError) as bad:
            await batches.ingest(batch.id, chunked(broken, 5), progress=progress.append)
        assert (bad.value.line, bad.value.index) == (3, 2)
        kept = await batches.get(batch.id)
        assert (kept.received, kept.sealed, kept.status) == (2, False, "PENDING")
        with pytest.raises(BatchLineError) as not_utf8:
            await batches.ingest(batch.id, chunked(b'{"task": "echo", "p": "\xff"}\n', 3))
        assert not_utf8.value.line == 1
        assert "UTF-8" in str(not_utf8.value)
        with pytest.raises(BatchIndexError):
            await batches.ingest(batch.id, chunked(b'{"task": "echo", "index": 5}\n', 100))
        # Resending everything is safe: items are deduplicated by index.
        result = await batches.ingest(batch.id, chunked(good, 11))
        assert (result.accepted, result.received, result.sealed) == (3, 5, True)
        assert progress
        async with running(worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
        assert batch_row(db, batch.id)["status"] == "COMPLETED"
        assert {i: r[1] for i, r in batch_runs(db, batch.id).items()} == {i: i for i in range(5)}


# -- processing --------------------------------------------------------------------------


async def test_an_item_that_cannot_trigger_is_retried_then_pre_failed(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    set_setting(db, "batch_item_max_attempts", 2)
    db.execute(
        "INSERT INTO fairlane.queues (environment, name, size_limit) VALUES ('env', 'full', 0)"
    )
    items = [
        {"task": "echo", "payload": 0},
        {"task": "echo", "payload": 1, "options": {"queue": "full"}},
        {"task": "echo", "payload": 2, "options": {"no_such_option": 1}},
        {"task": "echo", "payload": 3, "options": {"priority": 5, "tags": ["a"]}},
    ]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 4)
        await batches.ingest(batch.id, chunked(ndjson(items), 1000))
        async with running(worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
        state = batch_row(db, batch.id)
        assert (state["status"], state["succeeded"], state["failed"]) == ("PARTIAL_FAILED", 2, 2)
        runs = batch_runs(db, batch.id)
        assert runs[1][0] == runs[2][0] == "SYSTEM_FAILURE"
        assert runs[1][2]["code"] == "BATCH_ITEM_COULD_NOT_TRIGGER"
        assert "full" in runs[1][2]["message"]
        assert "no_such_option" in runs[2][2]["message"]
        attempts = db.execute(
            "SELECT attempts FROM fairlane.runs WHERE task = %s AND payload->>'index' = '1'",
            (BATCH_ITEM_TASK,),
        ).fetchone()
        assert attempts == (2,)
        row = db.execute(
            "SELECT priority, tags FROM fairlane.runs WHERE batch_id = %s AND batch_index = 3",
            (batch.id,),
        ).fetchone()
        assert row == (5, ["a"])


async def test_one_run_per_item_with_several_workers_and_redelivery(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    items = [{"task": "echo", "payload": i} for i in range(300)]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 300)
        await batches.set_limits("env", concurrency=20)
        await batches.ingest(batch.id, chunked(ndjson(items), 4096))
        # Redelivery: the carrier of item 0 executed twice makes one run.
        processor = BatchItemProcessor(dsn, "fairlane")
        ctx: Any = type("Ctx", (), {"is_last_attempt": False, "environment": "env"})()
        first = await processor.process(ctx, {"batch_id": batch.id, "index": 0})
        second = await processor.process(ctx, {"batch_id": batch.id, "index": 0})
        await processor.close()
        assert "run_id" in first
        assert "skipped" in second
        async with running(worker(dsn), worker(dsn), worker(dsn)):
            await wait_until(lambda: batch_done(db, batch.id), what="batch done")
        state = batch_row(db, batch.id)
        assert (state["status"], state["succeeded"], state["failed"]) == ("COMPLETED", 300, 0)
        runs = batch_runs(db, batch.id)
        assert sorted(runs) == list(range(300))
        (count,) = db.execute(
            "SELECT count(*) FROM fairlane.runs WHERE task = 'echo'"
        ).fetchone() or (0,)
        assert count == 300


async def test_a_huge_batch_does_not_hold_back_another_environments_small_one(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with AsyncBatchClient(dsn) as batches:
        big = await batches.create("big", 1000)
        await batches.ingest(big.id, chunked(ndjson([{"task": "echo"}] * 1000), 65536))
        small = await batches.create("small", 5)
        await batches.ingest(small.id, chunked(ndjson([{"task": "echo"}] * 5), 65536))
        async with running(worker(dsn, concurrency=4)):
            await wait_until(lambda: batch_done(db, small.id), what="small batch done")
            left = 1000 - batch_row(db, big.id)["succeeded"]
            assert left > 500, "the small batch waited for the big one"
            await wait_until(lambda: batch_done(db, big.id), what="big batch done", within=60)
        # The environment's batch concurrency caps its carriers (default 10).
        (limit,) = db.execute(
            "SELECT concurrency_limit FROM fairlane.queues "
            "WHERE environment = 'big' AND name = '__batches__'"
        ).fetchone() or (None,)
        assert limit == 10


# -- parents -----------------------------------------------------------------------------


def parent_tasks(dsn: str, size: int, *, seal: bool = True) -> TaskRegistry:
    registry = tasks()

    @registry.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> Any:
        async with AsyncBatchClient(dsn) as batches:
            batch = await batches.create(
                "env", size, parent_run_id=ctx.run_id, idempotency_key=f"parent-{ctx.run_id}"
            )
            items = [{"task": "echo", "payload": i} for i in range(size if seal else size - 1)]
            await batches.ingest(batch.id, chunked(ndjson(items), 50))
        results = await ctx.wait_for_batch(batch.id)
        return {
            "ok": [result.ok for result in results],
            "outputs": [result.output for result in results],
            "errors": [result.error for result in results],
        }

    return registry


async def test_a_waiting_parent_resumes_when_its_batch_completes(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    async with running(worker(dsn, parent_tasks(dsn, 12))), AsyncClient(dsn) as client:
        parent = await client.trigger("parent", None, environment="env")
        await wait_until(
            lambda: status_is(db, parent, "COMPLETED"),
            what="parent completed",
        )
        run = await client.get_run(parent)
    # One call: one result per item, in index order, each its run's output.
    assert run.result["outputs"] == list(range(12))
    assert run.result["ok"] == [True] * 12


async def test_an_unsealed_batch_is_aborted_and_its_parent_resumes_with_the_error(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    registry = parent_tasks(dsn, 4, seal=False)
    async with running(worker(dsn, registry, run_periodic_jobs=False)), AsyncClient(dsn) as client:
        parent = await client.trigger("parent", None, environment="env")
        await wait_until(
            lambda: status_is(db, parent, "WAITING"),
            what="parent waiting",
        )
        # The three items that came in have become runs before the abort (one still pending
        # then would be skipped by it).
        await wait_until(
            lambda: (
                len(db.execute("SELECT 1 FROM fairlane.runs WHERE batch_id IS NOT NULL").fetchall())
                == 3
            ),
            what="three item runs",
        )
        await anyio.to_thread.run_sync(abort_now, dsn)
        await wait_until(
            lambda: status_is(db, parent, "COMPLETED"),
            what="parent completed",
        )
        run = await client.get_run(parent)
    # The three items that came in ran; the fourth never did and reports the abort.
    assert run.result["outputs"][:3] == [0, 1, 2]
    assert run.result["ok"] == [True, True, True, False]
    assert run.result["errors"][3]["code"] == "BATCH_SEAL_TIMEOUT"
    (batch_id,) = db.execute("SELECT id FROM fairlane.batches").fetchone() or (0,)
    assert batch_row(db, batch_id)["status"] == "ABORTED"
    async with AsyncBatchClient(dsn) as batches:
        with pytest.raises(BatchAbortedError):
            await batches.ingest(batch_id, chunked(b'{"task": "echo", "index": 3}\n', 10))


# -- CLI ---------------------------------------------------------------------------------


def test_cli_ingests_a_file_and_shows_the_batch(
    dsn: str, db: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "items.ndjson"
    path.write_bytes(ndjson([{"task": "echo", "payload": i} for i in range(25)]))
    assert cli_main(["batch", "ingest", str(path), "--env", "cli", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["received"] == 25
    assert summary["sealed"] is True
    assert cli_main(["batch", "show", str(summary["id"]), "--dsn", dsn]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_count"] == 25
    assert shown["status"] == "PROCESSING"


# -- connections -------------------------------------------------------------------------


async def test_ingest_commits_each_slice_and_refuses_a_connection_in_a_transaction(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    items = ndjson([{"task": "echo", "payload": i} for i in range(5)])
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", 5)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("SELECT 1")  # a transaction is open
        with pytest.raises(BatchTransactionError):
            await ingest_items_async(conn, batch.id, chunked(items, 10))
        await conn.rollback()
        # Outside a transaction, on a connection without autocommit: every slice committed.
        result = await ingest_items_async(conn, batch.id, chunked(items, 10), slice_items=2)
        assert (result.accepted, result.sealed) == (5, True)
        assert conn.info.transaction_status == TransactionStatus.IDLE
    assert batch_row(db, batch.id)["sealed"] is True


async def test_carrier_runs_are_listed_only_when_asked_for(dsn: str) -> None:
    async with AsyncBatchClient(dsn) as batches, AsyncClient(dsn) as client:
        batch = await batches.create("env", 2)
        await batches.ingest(batch.id, chunked(ndjson([{"task": "echo"}] * 2), 100))
        assert await client.list_runs() == []
        carriers = await client.list_runs(include_carriers=True)
    assert [run.queue for run in carriers] == ["__batches__", "__batches__"]
