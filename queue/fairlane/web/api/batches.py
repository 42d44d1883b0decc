"""Batches in two phases: create, then stream the items as NDJSON.

``POST /api/v1/batches`` ``{"run_count", "parent_run_id"?, "idempotency_key"?}`` charges the
environment's batch bucket (429 with ``Retry-After`` when it is empty) and answers the batch.
``POST /api/v1/batches/{id}/items`` takes NDJSON, chunked or not and of any length, fed to
``ingest_stream`` as it arrives (memory stays flat): a line over the item size limit becomes a
pre-failed PAYLOAD_TOO_LARGE run, a bad line answers 422 naming its line and item index, with
every item before it kept and the batch still open; resends are deduplicated by index
(``?first_index=k`` numbers a resent stream's unindexed items from k). The upload holds no
database connection while it waits on its client (one is taken per slice stored), ends with
408 when it sends nothing for the idle timeout (what came before it stored), and takes one
of its environment's places for concurrent uploads (429 when they are taken;
``fairlane.web.uploads``). ``GET`` reads the batch back, and ``/items`` its items by index
(``?state=FAILED`` for the failed ones).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane.batches.api import create_batch_async, get_batch_async
from fairlane.batches.ingest import ingest_stream
from fairlane.engine.statement import rows_async
from fairlane.errors import BatchNotFoundError
from fairlane.models import Batch
from fairlane.schema.tables import BATCH_ITEM_STATES
from fairlane.web.api.runs import visible_run
from fairlane.web.auth import Caller, authenticate, state_of
from fairlane.web.bodies import read_object
from fairlane.web.errors import ApiError
from fairlane.web.params import INT32_MAX, MAX_ID, int_param, path_id
from fairlane.web.serialize import batch_json, ingest_json, item_json
from fairlane.web.state import AsyncConn, WebState

CREATE_FIELDS = {
    "run_count",
    "runCount",
    "parent_run_id",
    "parentRunId",
    "idempotency_key",
    "idempotencyKey",
    "environment",
}
MAX_ITEMS_PAGE = 1000


async def visible_batch(state: WebState, conn: AsyncConn, caller: Caller, batch_id: int) -> Batch:
    batch = await get_batch_async(conn, batch_id, schema=state.schema)
    if not caller.sees(batch.environment):
        raise BatchNotFoundError(batch_id)
    return batch


def _field(body: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in body:
            return body[name]
    return None


async def create(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    body = await read_object(request, state.max_body_bytes)
    unknown = sorted(set(body) - CREATE_FIELDS)
    if unknown:
        raise ApiError(422, "BadRequest", f"unknown field {unknown[0]!r}", field=unknown[0])
    environment = caller.environment(body.get("environment"))
    parent = _field(body, "parent_run_id", "parentRunId")
    if parent is not None and (
        isinstance(parent, bool) or not isinstance(parent, int) or not 0 < parent <= MAX_ID
    ):
        raise ApiError(422, "BadRequest", "parent_run_id must be a run id", field="parent_run_id")
    key = _field(body, "idempotency_key", "idempotencyKey")
    if key is not None and (not isinstance(key, str) or not key or "\x00" in key):
        raise ApiError(
            422,
            "BadRequest",
            "idempotency_key must be a non-empty string",
            field="idempotency_key",
        )
    async with state.connection() as conn:
        if parent is not None:
            await visible_run(state, conn, caller, parent)
        batch = await create_batch_async(
            conn,
            environment,
            _field(body, "run_count", "runCount"),
            parent_run_id=parent,
            idempotency_key=key,
            schema=state.schema,
        )
    return JSONResponse(batch_json(batch), status_code=201)


async def get(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    async with state.connection() as conn:
        batch = await visible_batch(state, conn, caller, path_id(request))
    return JSONResponse(batch_json(batch))


async def items(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    batch_id = path_id(request)
    limit = int_param(request, "limit", 100, low=1, high=MAX_ITEMS_PAGE) or 100
    after = int_param(request, "after_index", None, low=-1, high=INT32_MAX)
    item_state = request.query_params.get("state") or None
    if item_state is not None and item_state.upper() not in BATCH_ITEM_STATES:
        raise ApiError(
            400,
            "BadRequest",
            f"state is one of {', '.join(BATCH_ITEM_STATES)}",
            parameter="state",
        )
    async with state.connection() as conn:
        await visible_batch(state, conn, caller, batch_id)
        statement = state.engine.web.batch_items_page(
            batch_id, after, item_state.upper() if item_state else None, limit
        )
        found = await rows_async(conn, statement)
    next_after = found[-1].index if len(found) == limit else None
    return JSONResponse(
        {"data": [item_json(item) for item in found], "next_after_index": next_after}
    )


async def ingest(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    batch_id = path_id(request)
    first_index = int_param(request, "first_index", 0, low=0, high=INT32_MAX) or 0
    async with state.connection() as conn:
        batch = await visible_batch(state, conn, caller, batch_id)
    # No connection is held from here on but while a slice is stored: the body comes at the
    # client's pace, and a stalled client must not keep one from every other request.
    with state.uploads.hold(batch.environment):
        result = await ingest_stream(
            state.connection,
            batch_id,
            request.stream(),
            schema=state.schema,
            first_index=first_index,
            idle_timeout_s=state.upload_idle_timeout_s,
        )
    return JSONResponse(ingest_json(result))


routes = [
    Route("/batches", create, methods=["POST"], name="create_batch"),
    Route("/batches/{id:bigint}", get, methods=["GET"], name="get_batch"),
    Route("/batches/{id:bigint}/items", ingest, methods=["POST"], name="ingest_batch_items"),
    Route("/batches/{id:bigint}/items", items, methods=["GET"], name="batch_items"),
]
