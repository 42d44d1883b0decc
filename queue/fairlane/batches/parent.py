"""A parent's batch: what ``ctx.batch_trigger_and_wait`` makes, in the parent's wait.

The requests become a batch of the parent's (charged to its environment's token bucket, within
the item cap), with the semantics of a streamed batch: an item that can never become a run
becomes a pre-failed ``BATCH_ITEM_COULD_NOT_TRIGGER`` run, one over the item size limit a
``PAYLOAD_TOO_LARGE`` run, and the others go on. The items that can become runs at once do, in
the wait's transaction, with one trigger statement; if that statement is refused (a full
queue), they all go to carriers instead, which retry with backoff and pre-fail an item only on
their last attempt, as for a streamed batch. The parent waits on the batch, and through it on
every item's run (``attach_batch_runs``), so it resumes when every one of them is final.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from fairlane.batches.api import create_batch_async, item_max_bytes
from fairlane.batches.items import item_options
from fairlane.engine import engine
from fairlane.engine.batches import ItemColumns
from fairlane.engine.statement import run_async
from fairlane.errors import (
    PayloadError,
    QueueSizeLimitExceeded,
    RunError,
    RunNotFoundError,
    TriggerOptionError,
)
from fairlane.payload import encode_json
from fairlane.triggering.api import insert_runs_async
from fairlane.triggering.request import TriggerRequest, environment_of, insert_params
from fairlane.waitpoints import WaitResult

AsyncConn = psycopg.AsyncConnection[Any]
# The item number of a wait's edge to the batch itself; the items' runs are at their index.
BATCH_EDGE = -1


@dataclass(slots=True)
class _Items:
    """One ingest of every item: its columns, and what became of it at once."""

    tasks: list[str]
    payloads: list[str | None]
    options: list[str]
    oversized: list[bool]
    refusals: list[str | None]
    made: list[int | None]

    def columns(self, batch_id: int) -> ItemColumns:
        indexes = list(range(len(self.tasks)))
        return ItemColumns(
            batch_id,
            indexes,
            self.tasks,
            self.payloads,
            self.options,
            self.oversized,
            made=self.made,
            refusals=self.refusals,
        )


def batch_environment(requests: Sequence[TriggerRequest]) -> str:
    """A batch has one environment: the one its requests name."""
    environments = {environment_of(request) for request in requests}
    if len(environments) != 1:
        raise TriggerOptionError(
            "environment", sorted(environments), "the requests of one batch share one environment"
        )
    return environments.pop()


async def make_parent_batch(
    conn: AsyncConn, schema: str, requests: Sequence[TriggerRequest], parent_run_id: int
) -> tuple[int, int]:
    """Create the parent's batch of ``requests`` and ingest every item (triggering those that
    can be at once). Returns the batch id and its waitpoint. Raises ``BatchTooLargeError`` or
    ``BatchRateLimitedError`` as ``create_batch_async`` does."""
    batch = await create_batch_async(
        conn,
        batch_environment(requests),
        len(requests),
        parent_run_id=parent_run_id,
        schema=schema,
    )
    assert batch.waitpoint_id is not None  # made with a parent
    items = await _encode(conn, schema, requests)
    triggerable = [
        index
        for index, refusal in enumerate(items.refusals)
        if refusal is None and not items.oversized[index]
    ]
    if triggerable:
        try:
            async with conn.transaction():
                made = await insert_runs_async(
                    conn, [requests[index] for index in triggerable], schema=schema
                )
        except QueueSizeLimitExceeded:
            made = []  # carriers take them: retried with backoff, pre-failed on their last try
        except RunNotFoundError:
            # A request names a parent run that is not the environment's: its carrier
            # pre-fails it at once, and the others' carriers trigger them.
            made = []
        for index, run_id in zip(triggerable, made, strict=False):
            items.made[index] = run_id
    await run_async(conn, engine(schema).batches.ingest(items.columns(batch.id)))
    return batch.id, batch.waitpoint_id


async def _encode(conn: AsyncConn, schema: str, requests: Sequence[TriggerRequest]) -> _Items:
    max_bytes = await item_max_bytes(conn, schema)
    items = _Items([], [], [], [], [], [])
    for request in requests:
        refusal: str | None = None
        payload: str | None = None
        try:
            insert_params([request])
            payload = encode_json(request.payload)
            options = encode_json(item_options(request), what="options")
        except (TriggerOptionError, PayloadError) as error:
            refusal, options = str(error), "{}"
        items.tasks.append(request.task)
        items.payloads.append(payload)
        items.options.append(options)
        items.oversized.append(payload is not None and len(payload.encode()) > max_bytes)
        items.refusals.append(refusal)
        items.made.append(None)
    return items


def batch_results(rows: Sequence[tuple[int, WaitResult]]) -> list[WaitResult]:
    """One result per item, in index order, from the results of a wait on a batch (the batch's
    own at ``BATCH_EDGE``, the items' runs at their index). An item that never became a run (an
    aborted batch) carries the batch's error."""
    by_item = dict(rows)
    summary = by_item.get(BATCH_EDGE)
    if summary is None:
        raise RunError("a wait on a batch found no edge to the batch")
    details = summary.error if not summary.ok else summary.output
    run_count = int((details or {}).get("run_count", 0))
    missing = WaitResult(ok=False, error=summary.error or {"code": "BATCH_ITEM_MISSING"})
    return [by_item.get(index, missing) for index in range(run_count)]
