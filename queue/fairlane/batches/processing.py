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

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool

from fairlane.batches.items import item_request
from fairlane.connection import ConnectionOptions
from fairlane.control import BATCH_ITEM_COULD_NOT_TRIGGER
from fairlane.engine import engine
from fairlane.engine.statement import Statement, first_async, run_async
from fairlane.errors import (
    BatchItemNotTriggered,
    FairlaneError,
    InputError,
    RunNotFoundError,
    TriggerOptionError,
)
from fairlane.retry import Backoff
from fairlane.triggering.api import insert_runs_async
from fairlane.triggering.boundary import BATCH_ITEM_TASK as BATCH_ITEM_TASK
from fairlane.triggering.request import BATCH_QUEUE

if TYPE_CHECKING:
    from fairlane.worker.context import RunContext
    from fairlane.worker.registry import TaskRegistry

# 8 attempts (the batch_item_max_attempts setting) wait 0.1 * 2^(n-1) s with jitter between
# them, each capped at 30 s: about 13 to 25 s in all.
BATCH_ITEM_BACKOFF = Backoff(min_s=0.1, max_s=30.0, factor=2.0)
# record_batch_item refuses a carrier's run for a batch aborted since the carrier read it.
BATCH_ABORTED_SQLSTATE = "FLB01"
# The most connections a worker's carriers hold at once; more carriers wait for one (each
# holds it for a few short statements).
BATCH_CONNECTIONS = 4

AsyncConn = psycopg.AsyncConnection[Any]


def with_batch_queue(queues: Iterable[str]) -> list[str]:
    """A worker's queue filter, with the batch carriers' queue added."""
    chosen = list(dict.fromkeys(queues))
    return chosen if BATCH_QUEUE in chosen else [*chosen, BATCH_QUEUE]


@dataclass(frozen=True, slots=True)
class _Decision:
    """What a carrier made of its item: the carrier's result, the state the item reached
    (None: left alone, it was decided before), and the statement that records it (sent with
    the COMMIT)."""

    result: dict[str, Any]
    state: str | None = None
    record: Statement[Any] | None = None


class BatchItemProcessor:
    """The handler's state in one worker: its database, and a small pool of connections,
    opened when the first carrier runs. ``on_item`` is told the state each item reached once
    its transaction has committed (the worker's fairlane_batch_items_total)."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        max_connections: int = BATCH_CONNECTIONS,
        options: ConnectionOptions | None = None,
        on_item: Callable[[str], None] | None = None,
    ) -> None:
        self.schema = schema
        self._on_item = on_item
        self._batches = engine(schema).batches
        options = options or ConnectionOptions(application_name="fairlane batches")
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=0,
            max_size=max_connections,
            open=False,
            kwargs=options.kwargs(dsn),
            name="fairlane-batch-carriers",
            timeout=options.connect_timeout,
        )
        self._opened = False
        self._open_lock = anyio.Lock()

    async def close(self) -> None:
        if self._opened:
            await self._pool.close()

    async def process(self, ctx: RunContext, payload: Any) -> dict[str, Any]:
        batch_id, index = int(payload["batch_id"]), int(payload["index"])
        async with self._open_lock:
            if not self._opened:
                await self._pool.open()
                self._opened = True
        async with self._pool.connection() as conn:
            try:
                return await self._process(conn, ctx, batch_id, index)
            except psycopg.Error as error:
                if error.sqlstate != BATCH_ABORTED_SQLSTATE:
                    raise
            # The batch was aborted while its run was being made (rolled back with the
            # transaction): decide again, and the item is skipped.
            return await self._process(conn, ctx, batch_id, index)

    async def _process(
        self, conn: AsyncConn, ctx: RunContext, batch_id: int, index: int
    ) -> dict[str, Any]:
        # The transaction is begun and ended by hand so that its last statement, the one that
        # bumps the batch's counters (its row is hot: every item of the batch updates it),
        # travels with the COMMIT in one round trip: the row stays locked for server time
        # only, not for a round trip through a busy event loop.
        await conn.execute("BEGIN")
        try:
            # The commit waits for the WAL flush: lost in a server crash, the item's run would
            # be missing while the carrier, whose lease survived, is completed after it.
            decision = await self._decide(conn, ctx, batch_id, index)
            final = decision.record
            if final is None:
                await conn.execute("COMMIT")
            else:
                # Parameters bound client-side: one query string may then hold two statements.
                async with psycopg.AsyncClientCursor(conn) as cursor:
                    await cursor.execute(final.sql + "; COMMIT", final.params)
        except BaseException:
            if not conn.closed and not conn.broken:
                with anyio.CancelScope(shield=True):
                    await conn.execute("ROLLBACK")
            raise
        if decision.state is not None and self._on_item is not None:
            self._on_item(decision.state)
        return decision.result

    async def _decide(
        self, conn: AsyncConn, ctx: RunContext, batch_id: int, index: int
    ) -> _Decision:
        # A carrier serves the items of its own environment's batches only: another's answers
        # exactly like a missing one (docs/security.md). Only the engine makes carriers, so
        # this is defence in depth.
        item = await first_async(conn, self._batches.lock_item(batch_id, index, ctx.environment))
        if item is None:
            return _Decision({"skipped": "no such item"})
        if item.state != "PENDING":
            return _Decision({"skipped": f"item already {item.state}"})
        if item.status == "ABORTED":
            await run_async(conn, self._batches.skip_item(batch_id, index))
            return _Decision({"skipped": "batch aborted"}, "SKIPPED")
        try:
            request = item_request(
                item.task, item.payload, item.options or {}, item.environment, item.parent_run_id
            )
        except (TypeError, ValueError, FairlaneError) as error:
            return self._fail(batch_id, index, f"invalid trigger options: {error}")
        try:
            async with conn.transaction():
                (run_id,) = await insert_runs_async(conn, [request], schema=self.schema)
        except (TriggerOptionError, RunNotFoundError) as error:
            # Refused at the tenant boundary (a parent run that is not the batch's
            # environment's, a reserved name): no retry can change that.
            return self._fail(batch_id, index, str(error))
        except Exception as error:
            # A full queue, a failed statement (rolled back to the savepoint): retried, and on
            # the last attempt the item fails for good.
            if not ctx.is_last_attempt or conn.broken:
                raise BatchItemNotTriggered(str(error)) from error
            return self._fail(batch_id, index, str(error))
        record = self._batches.record_item(batch_id, index, run_id)
        return _Decision({"run_id": run_id}, "TRIGGERED", record)

    def _fail(self, batch_id: int, index: int, reason: str) -> _Decision:
        fail = self._batches.fail_item(batch_id, index, BATCH_ITEM_COULD_NOT_TRIGGER, reason)
        return _Decision({"failed": BATCH_ITEM_COULD_NOT_TRIGGER, "reason": reason}, "FAILED", fail)


current_processor: ContextVar[BatchItemProcessor | None] = ContextVar(
    "fairlane_batch_processor", default=None
)


async def handle_batch_item(ctx: RunContext, payload: Any) -> dict[str, Any]:
    processor = current_processor.get()
    if processor is None:
        raise InputError("fairlane.batch_item runs only inside a fairlane Worker")
    return await processor.process(ctx, payload)


def install(registry: TaskRegistry) -> None:
    """Register the built-in batch item task (once per registry)."""
    if BATCH_ITEM_TASK not in registry:
        registry.register(BATCH_ITEM_TASK, handle_batch_item, backoff=BATCH_ITEM_BACKOFF)
