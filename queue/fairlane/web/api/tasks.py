"""Triggering: one run, or many all or nothing.

``POST /api/v1/tasks/{task}/trigger`` ``{"payload": ..., "options": {...}}`` answers
``{"id": run_id}``; ``POST /api/v1/tasks/trigger-many`` ``{"items": [{"task", "payload",
"options"}, ...]}`` answers ``{"ids": [...]}`` in item order, or an error naming the first
item that could not be taken, and then no run was made.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane.triggering.api import insert_runs_async
from fairlane.triggering.request import TriggerRequest
from fairlane.web.api.options import trigger_request
from fairlane.web.auth import authenticate, state_of
from fairlane.web.bodies import read_object
from fairlane.web.errors import ApiError
from fairlane.web.state import WebState

BODY_FIELDS = {"payload", "options"}
ITEM_FIELDS = {"task", "payload", "options"}


async def _trigger(state: WebState, requests: Sequence[TriggerRequest]) -> list[int]:
    """Every request is in the caller's environment already (``trigger_request``); the trigger
    statement refuses a parent run of any other environment exactly like a missing one (404),
    and the engine's own task and queue names (docs/security.md)."""
    async with state.connection() as conn:
        return await insert_runs_async(conn, requests, schema=state.schema)


def _unknown_fields(document: dict[str, object], allowed: set[str], index: int | None) -> None:
    unknown = sorted(set(document) - allowed)
    if unknown:
        where = f" (item {index})" if index is not None else ""
        raise ApiError(
            422,
            "BadRequest",
            f"unknown field {unknown[0]!r}{where}; expected {', '.join(sorted(allowed))}",
            field=unknown[0],
            index=index,
        )


async def trigger(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    body = await read_object(request, state.max_body_bytes, required=False)
    _unknown_fields(body, BODY_FIELDS, None)
    task = request.path_params["task"]
    run_request = trigger_request(caller, task, body.get("payload"), body.get("options"))
    (run_id,) = await _trigger(state, [run_request])
    return JSONResponse({"id": run_id})


async def trigger_many(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    body = await read_object(request, state.max_body_bytes)
    _unknown_fields(body, {"items"}, None)
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise ApiError(422, "BadRequest", '"items" must be a non-empty array')
    requests: list[TriggerRequest] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ApiError(422, "BadRequest", f"item {index} must be an object", index=index)
        _unknown_fields(item, ITEM_FIELDS, index)
        requests.append(
            trigger_request(
                caller, item.get("task"), item.get("payload"), item.get("options"), index
            )
        )
    ids = await _trigger(state, requests)
    return JSONResponse({"ids": ids})


routes = [
    Route("/tasks/trigger-many", trigger_many, methods=["POST"], name="trigger_many"),
    Route("/tasks/{task}/trigger", trigger, methods=["POST"], name="trigger"),
]
