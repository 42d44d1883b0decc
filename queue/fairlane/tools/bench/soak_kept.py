"""soak: what a user can still see, placed at the start, must outlive every retention window.

Three things are placed before the producer starts and checked once it stops:

* a run triggered with an idempotency key (the key's default lifetime, 30 days): it completes
  at once, and the same key must still return it;
* a run waiting on a token nobody completes meanwhile: the token, its wait edge and the run
  (WAITING) must all be there, and completing the token must then wake the run to COMPLETED;
* a batch of two items of which only the first is sent (a batch in progress: unsealed, its
  seal deadline far off): the batch, its item and the item's finished run must be there, and
  sending the second item must then complete the batch.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient, RunContext, TaskRegistry
from fairlane.batches import AsyncBatchClient
from fairlane.tools.bench.common import SCHEMA
from fairlane.tools.bench.enqueue import TASK
from fairlane.waitpoints import complete_token_async, create_token_async

WAITER = "soak.waiter"
KEY = "soak-kept"
POLL_S = 0.05
SETTLE_TIMEOUT_S = 60.0

STATUS_SQL = f"SELECT status FROM {SCHEMA}.runs WHERE id = %s"
TOKEN_SQL = f"""
SELECT w.status, EXISTS (SELECT 1 FROM {SCHEMA}.run_waitpoints e
                         WHERE e.waitpoint_id = w.id AND e.run_id = %(run)s)
FROM {SCHEMA}.waitpoints w WHERE w.id = %(token)s
"""
BATCH_SQL = f"""
SELECT b.status, i.run_id, r.status
FROM {SCHEMA}.batches b
LEFT JOIN {SCHEMA}.batch_items i ON i.batch_id = b.id AND i.index = 0
LEFT JOIN {SCHEMA}.runs r ON r.id = i.run_id
WHERE b.id = %s
"""


def add_waiter(tasks: TaskRegistry) -> None:
    @tasks.task(WAITER)
    async def waiter(ctx: RunContext, payload: Any) -> None:
        await ctx.wait_for_token(payload["token"])


@dataclass
class Kept:
    keyed_run: int
    token: int
    waiting_run: int
    batch: int


async def item(index: int) -> AsyncIterator[bytes]:
    yield (json.dumps({"task": TASK, "payload": {"kept": index}}) + "\n").encode()


async def until(
    conn: psycopg.AsyncConnection[Any], sql: str, params: Any, last: Any, *, column: int = 0
) -> None:
    """Poll ``sql`` until ``column`` of its first row is ``last``."""
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        while True:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is not None and row[column] == last:
                return
            await anyio.sleep(POLL_S)


async def place(dsn: str, conn: psycopg.AsyncConnection[Any]) -> Kept:
    """Place the three, once a worker runs; returns when each is in its state."""
    async with AsyncClient(dsn, schema=SCHEMA) as client:
        keyed = await client.trigger(TASK, {"kept": "key"}, idempotency_key=KEY)
        token = await create_token_async(conn, schema=SCHEMA)
        waiting = await client.trigger(WAITER, {"token": token})
    async with AsyncBatchClient(dsn, schema=SCHEMA) as batches:
        batch = (await batches.create("default", 2)).id
        await batches.ingest(batch, item(0))
    await until(conn, STATUS_SQL, (keyed,), "COMPLETED")
    await until(conn, STATUS_SQL, (waiting,), "WAITING")
    await until(conn, BATCH_SQL, (batch,), "COMPLETED", column=2)
    return Kept(keyed, token, waiting, batch)


async def check(dsn: str, conn: psycopg.AsyncConnection[Any], kept: Kept) -> dict[str, bool]:
    """Whether each is still there and still works; a worker must still run."""
    token_params = {"run": kept.waiting_run, "token": kept.token}
    batch_row = await (await conn.execute(BATCH_SQL, (kept.batch,))).fetchone()
    found = {
        "idempotency_key_kept": await _same_key_run(dsn, kept.keyed_run),
        "waitpoint_kept": (await (await conn.execute(TOKEN_SQL, token_params)).fetchone())
        == ("PENDING", True)
        and (await (await conn.execute(STATUS_SQL, (kept.waiting_run,))).fetchone())
        == ("WAITING",),
        "batch_kept": batch_row is not None
        and batch_row[0] == "PENDING"
        and batch_row[1] is not None
        and batch_row[2] == "COMPLETED",
    }
    await complete_token_async(conn, kept.token, "done", schema=SCHEMA)
    await until(conn, STATUS_SQL, (kept.waiting_run,), "COMPLETED")
    async with AsyncBatchClient(dsn, schema=SCHEMA) as batches:
        await batches.ingest(kept.batch, item(1), first_index=1)
    await until(conn, BATCH_SQL, (kept.batch,), "COMPLETED")
    return found


async def _same_key_run(dsn: str, keyed_run: int) -> bool:
    async with AsyncClient(dsn, schema=SCHEMA) as client:
        return await client.trigger(TASK, {"kept": "again"}, idempotency_key=KEY) == keyed_run
