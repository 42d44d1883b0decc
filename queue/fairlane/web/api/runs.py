"""Runs: get one, list (filters and cursor paging), cancel, retry, reschedule.

A run of another environment than the key's answers 404, like an id that does not exist.
``GET /api/v1/runs`` pages newest first: pass the ``next_before_id`` of a page as
``before_id`` for the next one (null: no more).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane import control
from fairlane.control import RunFilter
from fairlane.engine.statement import drive_async
from fairlane.errors import RunNotFoundError
from fairlane.models import Run, RunStatus
from fairlane.web.api.options import delay_value
from fairlane.web.auth import Caller, authenticate, state_of
from fairlane.web.bodies import read_object
from fairlane.web.errors import ApiError
from fairlane.web.params import MAX_ID, int_param, path_id
from fairlane.web.realtime.access import scoped_run, token_scope
from fairlane.web.serialize import cancel_json, run_json
from fairlane.web.state import AsyncConn, WebState

MAX_PAGE = 500
DEFAULT_PAGE = 50


async def visible_run(state: WebState, conn: AsyncConn, caller: Caller, run_id: int) -> Run:
    """The run, if the key may see it; else ``RunNotFoundError`` (404), as for no run."""
    run = await drive_async(conn, control.get_run(state.engine, run_id))
    if not caller.sees(run.environment):
        raise RunNotFoundError(run_id)
    return run


async def get_run(request: Request) -> JSONResponse:
    """Under an API key, or a realtime token whose run, tag or batch holds the run."""
    state = state_of(request)
    run_id = path_id(request)
    scope = await token_scope(request)
    caller = None if scope is not None else await authenticate(request)
    async with state.connection() as conn:
        if scope is not None:
            run = await scoped_run(state, conn, scope, run_id)
        else:
            assert caller is not None
            run = await visible_run(state, conn, caller, run_id)
    return JSONResponse(run_json(run))


def _statuses(request: Request) -> list[str] | None:
    given = [
        part.strip().upper()
        for value in request.query_params.getlist("status")
        for part in value.split(",")
        if part.strip()
    ]
    known = {status.value for status in RunStatus}
    for status in given:
        if status not in known:
            raise ApiError(
                400,
                "BadRequest",
                f"unknown status {status!r}; one of {', '.join(sorted(known))}",
                parameter="status",
            )
    return given or None


def run_filter(request: Request, caller: Caller) -> RunFilter:
    params = request.query_params
    environment = params.get("environment") or None
    if not caller.is_admin:
        environment = caller.environment(environment)
    limit = int_param(request, "limit", DEFAULT_PAGE, low=1, high=MAX_PAGE)
    return RunFilter(
        environment=environment,
        queue=params.get("queue") or None,
        task=params.get("task") or None,
        status=_statuses(request),
        tags=[tag for tag in params.getlist("tag") if tag],
        limit=limit or DEFAULT_PAGE,
        before_id=int_param(request, "before_id", None, low=1, high=MAX_ID),
        batch_id=int_param(request, "batch_id", None, low=1, high=MAX_ID),
        idempotency_key=params.get("idempotency_key") or None,
    )


async def list_runs(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    filters = run_filter(request, caller)
    async with state.connection() as conn:
        runs = await drive_async(conn, control.list_runs(state.engine, filters))
    next_before = runs[-1].id if len(runs) == filters.limit else None
    return JSONResponse({"data": [run_json(run) for run in runs], "next_before_id": next_before})


async def cancel_run(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    run_id = path_id(request)
    async with state.connection() as conn:
        await visible_run(state, conn, caller, run_id)
        result = await drive_async(conn, control.cancel(state.engine, run_id))
    return JSONResponse(cancel_json(result))


async def retry_run(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    run_id = path_id(request)
    async with state.connection() as conn:
        await visible_run(state, conn, caller, run_id)
        run = await drive_async(conn, control.retry(state.engine, run_id))
    return JSONResponse(run_json(run))


async def reschedule_run(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    run_id = path_id(request)
    body = await read_object(request, state.max_body_bytes)
    if set(body) != {"delay"}:
        raise ApiError(
            422, "BadRequest", 'the body is {"delay": seconds, a duration or an ISO 8601 time}'
        )
    delay = delay_value(body["delay"], None)
    async with state.connection() as conn:
        await visible_run(state, conn, caller, run_id)
        run = await drive_async(conn, control.reschedule(state.engine, run_id, delay))
    return JSONResponse(run_json(run))


routes = [
    Route("/runs", list_runs, methods=["GET"], name="list_runs"),
    Route("/runs/{id:bigint}", get_run, methods=["GET"], name="get_run"),
    Route("/runs/{id:bigint}/cancel", cancel_run, methods=["POST"], name="cancel_run"),
    Route("/runs/{id:bigint}/retry", retry_run, methods=["POST"], name="retry_run"),
    Route("/runs/{id:bigint}/reschedule", reschedule_run, methods=["POST"], name="reschedule_run"),
]
