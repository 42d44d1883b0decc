"""Batch helpers: a worker with an echo task, NDJSON bodies and chunked streams, and reads of a
batch's rows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import psycopg

from fairlane import RunContext, TaskRegistry, Worker
from fairlane.maintenance import run_now


def tasks() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    return registry


def worker(dsn: str, registry: TaskRegistry | None = None, **options: Any) -> Worker:
    options.setdefault("poll_interval", 0.05)
    options.setdefault("concurrency", 8)
    return Worker(registry or tasks(), dsn, **options)


def ndjson(items: Sequence[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
        await anyio.lowlevel.checkpoint()


def set_setting(db: psycopg.Connection[Any], name: str, value: Any) -> None:
    db.execute(
        "UPDATE fairlane.settings SET value = %s::jsonb WHERE name = %s", (json.dumps(value), name)
    )


def batch_row(db: psycopg.Connection[Any], batch_id: int) -> dict[str, Any]:
    row = db.execute(
        "SELECT status, sealed, succeeded, failed, run_count FROM fairlane.batches WHERE id = %s",
        (batch_id,),
    ).fetchone()
    assert row is not None
    return dict(zip(("status", "sealed", "succeeded", "failed", "run_count"), row, strict=True))


def batch_runs(db: psycopg.Connection[Any], batch_id: int) -> dict[int, tuple[str, Any, Any]]:
    rows = db.execute(
        "SELECT batch_index, status, payload, error FROM fairlane.runs WHERE batch_id = %s",
        (batch_id,),
    ).fetchall()
    runs = {int(index): (status, payload, error) for index, status, payload, error in rows}
    assert len(runs) == len(rows)
    return runs


def status_is(db: psycopg.Connection[Any], run_id: int, status: str) -> bool:
    row = db.execute("SELECT status FROM fairlane.runs WHERE id = %s", (run_id,)).fetchone()
    return row is not None and row[0] == status


def abort_now(dsn: str) -> None:
    """Every batch past its seal deadline, and the periodic job run now. In a thread: a
    blocking statement on the event loop could wait on a lock held by a transaction of the
    worker on that same loop (a carrier bumping the batch's counters)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE fairlane.batches SET seal_deadline = now() - interval '1 second'")
        run_now(conn, "abort_unsealed_batches")


async def batch_done(db: psycopg.Connection[Any], batch_id: int) -> bool:
    return batch_row(db, batch_id)["status"] in ("COMPLETED", "PARTIAL_FAILED", "ABORTED")
