"""Turning batch items into runs: the built-in task ``fairlane.batch_item``.

Ingesting an item inserts a carrier run of this task in the environment's reserved queue
``__batches__``, whose concurrency limit is the environment's batch concurrency; the fair
scheduler hands carriers out like any run (DRR across environments), so one huge batch does
not hold back another environment's small one. Carriers count toward none of the
environment's limits (its runs do), and every worker claims them whatever its queue filter.

The handler works in one transaction under the item's row lock: an item no longer PENDING is
left alone (redelivery, a second worker), so each item gets exactly one run; the run is
triggered, linked to (batch, index) (a unique index backs this up), the item marked and the
batch counters bumped together. An item of an aborted batch is skipped, also when the abort
commits while its run is being made (the counters' statement refuses it). A trigger that
fails (a full queue, ...) is retried with the task's backoff; on the carrier's last attempt, or
at once for options that can never work, the item becomes a pre-failed
``BATCH_ITEM_COULD_NOT_TRIGGER`` run instead. Every Worker registers the handler in its
registry and gives it a small pool of connections of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import psycopg
from psycopg import sql

from fairlane.batches.items import item_request
from fairlane.control import BATCH_ITEM_COULD_NOT_TRIGGER
from fairlane.engine.sqlfiles import query
from fairlane.errors import FairlaneError
from fairlane.retry import Backoff
from fairlane.triggering.api import trigger_many_async
from fairlane.triggering.request import BATCH_QUEUE

if TYPE_CHECKING:
    from fairlane.worker.context import RunContext
    from fairlane.worker.registry import TaskRegistry

BATCH_ITEM_TASK = "fairlane.batch_item"
# 8 attempts (the batch_item_max_attempts setting) wait 0.1 * 2^(n-1) s with jitter between
# them, each capped at 30 s: about 13 to 25 s in all.
BATCH_ITEM_BACKOFF = Backoff(min_s=0.1, max_s=30.0, factor=2.0)
# record_batch_item refuses a carrier's run for a batch aborted since the carrier read it.
BATCH_ABORTED_SQLSTATE = "FLB01"

AsyncConn = psycopg.AsyncConnection[Any]


def with_batch_queue(queues: Iterable[str]) -> list[str]:
    """A worker's queue filter, with the batch carriers' queue added."""
    chosen = list(dict.fromkeys(queues))
    return chosen if BATCH_QUEUE in chosen else [*chosen, BATCH_QUEUE]


class BatchItemNotTriggered(FairlaneError):
    """The item could not become a run on this attempt; the carrier retries it."""


class BatchItemProcessor:
    """The handler's state in one worker: its database, and a few connections."""

    def __init__(self, dsn: str, schema: str, *, max_idle: int = 32) -> None:
        self.dsn = dsn
        self.schema = schema
        self.max_idle = max_idle
        self._idle: list[AsyncConn] = []

    async def _acquire(self) -> AsyncConn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.broken:
                return conn
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def _release(self, conn: AsyncConn) -> None:
        if conn.closed or conn.broken or len(self._idle) >= self.max_idle:
            await conn.close()
        else:
            self._idle.append(conn)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    async def process(self, ctx: RunContext, payload: Any) -> dict[str, Any]:
        batch_id, index = int(payload["batch_id"]), int(payload["index"])
        conn = await self._acquire()
        try:
            try:
                return await self._process(conn, ctx, batch_id, index)
            except psycopg.Error as error:
                if error.sqlstate != BATCH_ABORTED_SQLSTATE:
                    raise
            # The batch was aborted while its run was being made (rolled back with the
            # transaction): decide again, and the item is skipped.
            return await self._process(conn, ctx, batch_id, index)
        finally:
            await self._release(conn)

    async def _process(
        self, conn: AsyncConn, ctx: RunContext, batch_id: int, index: int
    ) -> dict[str, Any]:
        key = {"batch_id": batch_id, "index": index}
        # The transaction is begun and ended by hand so that its last statement, the one that
        # bumps the batch's counters (its row is hot: every item of the batch updates it),
        # travels with the COMMIT in one round trip: the row stays locked for server time
        # only, not for a round trip through a busy event loop.
        await conn.execute("BEGIN")
        try:
            # No wait for the flush either. Safe: the carrier's completion is written later
            # with a synchronous commit, which flushes this WAL first; a lost commit is redone.
            await conn.execute("SET LOCAL synchronous_commit = off")
            result, final = await self._decide(conn, ctx, key)
            await conn.execute(sql.Composed([final, sql.SQL("; COMMIT")]))
        except BaseException:
            if not conn.closed and not conn.broken:
                with anyio.CancelScope(shield=True):
                    await conn.execute("ROLLBACK")
            raise
        return result

    async def _decide(
        self, conn: AsyncConn, ctx: RunContext, key: dict[str, int]
    ) -> tuple[dict[str, Any], sql.Composable]:
        """What became of the item, and the statement that records it (sent with COMMIT)."""
        nothing = sql.SQL("SELECT 1")
        cursor = await conn.execute(query("lock_batch_item", self.schema), key)
        row = await cursor.fetchone()
        if row is None:
            return {"skipped": "no such item"}, nothing
        state, task, item_payload, options, environment, batch_status, parent = row
        if state != "PENDING":
            return {"skipped": f"item already {state}"}, nothing
        if batch_status == "ABORTED":
            await conn.execute(query("skip_batch_item", self.schema), key)
            return {"skipped": "batch aborted"}, nothing
        try:
            request = item_request(task, item_payload, options or {}, environment, parent)
        except (TypeError, ValueError, FairlaneError) as error:
            return self._fail(key, f"invalid trigger options: {error}")
        try:
            async with conn.transaction():
                (run_id,) = await trigger_many_async(conn, [request], schema=self.schema)
        except Exception as error:
            # A full queue, a refused option, a failed statement (rolled back to the
            # savepoint): retried, and on the last attempt the item fails for good.
            if not ctx.is_last_attempt or conn.broken:
                raise BatchItemNotTriggered(str(error)) from error
            return self._fail(key, str(error))
        record = sql.SQL("SELECT {}.record_batch_item({}, {}, {}, true, NULL)").format(
            sql.Identifier(self.schema), key["batch_id"], key["index"], run_id
        )
        return {"run_id": run_id}, record

    def _fail(self, key: dict[str, int], reason: str) -> tuple[dict[str, Any], sql.Composable]:
        fail = sql.SQL("SELECT {}.fail_batch_item({}, {}, {}, {})").format(
            sql.Identifier(self.schema), key["batch_id"], key["index"],
            BATCH_ITEM_COULD_NOT_TRIGGER, reason,
        )  # fmt: skip
        return {"failed": BATCH_ITEM_COULD_NOT_TRIGGER, "reason": reason}, fail


current_processor: ContextVar[BatchItemProcessor | None] = ContextVar(
    "fairlane_batch_processor", default=None
)


async def handle_batch_item(ctx: RunContext, payload: Any) -> dict[str, Any]:
    processor = current_processor.get()
    if processor is None:
        raise FairlaneError("fairlane.batch_item runs only inside a fairlane Worker")
    return await processor.process(ctx, payload)


def install(registry: TaskRegistry) -> None:
    """Register the built-in batch item task (once per registry)."""
    if BATCH_ITEM_TASK not in registry:
        registry.register(BATCH_ITEM_TASK, handle_batch_item, backoff=BATCH_ITEM_BACKOFF)
