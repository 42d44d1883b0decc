"""Resending a batch while a worker turns its items into runs: no deadlock, exact counts."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fairlane import RunContext, TaskRegistry, Worker
from fairlane.batches import AsyncBatchClient
from tests.helpers import running, wait_until

pytestmark = pytest.mark.anyio

ITEMS = 600
# Sent before the worker starts; the resends repeat them while carriers record them.
FIRST = 500
RESENDERS = 4
MAX_ROUNDS = 30


def tasks() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("echo")
    async def echo(ctx: RunContext, payload: Any) -> Any:
        return payload

    return registry


async def stream(lines: list[bytes]) -> AsyncIterator[bytes]:
    for start in range(0, len(lines), 100):
        yield b"".join(lines[start : start + 100])
        await anyio.lowlevel.checkpoint()


async def resend_until_recorded(dsn: str, batch_id: int, lines: list[bytes], seed: int) -> int:
    """Resend ``lines`` in a fresh order each round, on a connection of its own, until the
    worker has recorded all of them (or MAX_ROUNDS). Returns the items it added (none: every
    one was in already)."""
    shuffle = random.Random(seed).shuffle
    accepted = 0
    async with AsyncBatchClient(dsn) as batches:
        for _ in range(MAX_ROUNDS):
            if (await batches.get(batch_id)).succeeded >= len(lines):
                break
            shuffle(lines)
            accepted += (await batches.ingest(batch_id, stream(lines))).accepted
    return accepted


def deadlocks(db: psycopg.Connection[Any]) -> int:
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def other_backends(db: psycopg.Connection[Any]) -> int:
    """Client backends on the test database besides this one and the fixture's connection:
    a backend reports its statistics (deadlocks among them) when it exits."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0]) - 1 if row else 0


def one_value(db: psycopg.Connection[Any], statement: str, *params: Any) -> Any:
    row = db.execute(statement, params).fetchone()
    return row[0] if row else None


async def test_resends_while_a_worker_processes_items_never_deadlock(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    lines = [
        json.dumps({"index": i, "task": "echo", "payload": i}).encode() + b"\n"
        for i in range(ITEMS)
    ]
    async with AsyncBatchClient(dsn) as batches:
        batch = await batches.create("env", ITEMS)
        await batches.set_limits("env", concurrency=16)
        first = await batches.ingest(batch.id, stream(lines[:FIRST]))
        assert (first.accepted, first.sealed) == (FIRST, False)
        async with running(Worker(tasks(), dsn, concurrency=16, poll_interval=0.05)):
            accepted: list[int] = []

            async def resender(seed: int) -> None:
                accepted.append(await resend_until_recorded(dsn, batch.id, lines[:FIRST], seed))

            async with anyio.create_task_group() as group:
                for seed in range(RESENDERS):
                    group.start_soon(resender, seed)
            assert accepted == [0] * RESENDERS
            rest = await batches.ingest(batch.id, stream(lines[FIRST:]))
            assert (rest.accepted, rest.received, rest.sealed) == (ITEMS - FIRST, ITEMS, True)
            await wait_until(
                lambda: (
                    one_value(db, "SELECT status FROM fairlane.batches WHERE id = %s", batch.id)
                    == "COMPLETED"
                ),
                what="the batch completed",
            )
    row = db.execute(
        "SELECT succeeded, failed, run_count FROM fairlane.batches WHERE id = %s", (batch.id,)
    ).fetchone()
    assert row == (ITEMS, 0, ITEMS)
    made = db.execute(
        "SELECT batch_index, payload FROM fairlane.runs WHERE batch_id = %s ORDER BY batch_index",
        (batch.id,),
    ).fetchall()
    assert made == [(i, i) for i in range(ITEMS)]
    # Every carrier made its run on its first attempt: none was a deadlock's victim.
    carriers = db.execute(
        "SELECT count(*), max(attempts) FROM fairlane.runs WHERE task = 'fairlane.batch_item'"
    ).fetchone()
    assert carriers == (ITEMS, 1)
    await wait_until(lambda: other_backends(db) == 0, what="the test's connections closed")
    assert deadlocks(db) == 0
