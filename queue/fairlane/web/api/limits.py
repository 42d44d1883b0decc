"""Queue and environment limits: read, set, pause, resume; the scheduler's global settings.

``PUT`` bodies change only the fields they hold: ``concurrency_limit`` and ``size_limit``
take an integer or null (unlimited), ``paused`` a boolean, an environment's ``burst_factor`` a
number of at least 1. An environment key acts on its own environment only (403 otherwise);
the scheduler needs an admin key.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane import limits
from fairlane.engine.statement import first_async
from fairlane.models import EnvironmentSettings, QueueSettings
from fairlane.web.auth import Caller, authenticate, state_of
from fairlane.web.bodies import read_object
from fairlane.web.errors import ApiError
from fairlane.web.serialize import (
    environment_json,
    limits_row_json,
    queue_json,
    scheduler_json,
)
from fairlane.web.state import AsyncConn, WebState

ENVIRONMENT_FIELDS = {"concurrency_limit", "burst_factor", "size_limit", "paused"}
QUEUE_FIELDS = {
    "concurrency_limit",
    "size_limit",
    "total_limit",
    "rate_limit",
    "rate_period_s",
    "rate_burst",
    "paused",
}
SCHEDULER_FIELDS = {
    "quantum",
    "max_deficit",
    "global_concurrency_limit",
    "rate_limit_per_s",
    "rate_burst",
}


def _changes(body: dict[str, Any], allowed: set[str]) -> dict[str, Any]:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ApiError(
            422,
            "BadRequest",
            f"unknown field {unknown[0]!r}; expected {', '.join(sorted(allowed))}",
            field=unknown[0],
        )
    if "paused" in body and not isinstance(body["paused"], bool):
        raise ApiError(422, "SettingError", "paused must be true or false", setting="paused")
    return body


async def _environment(state: WebState, conn: AsyncConn, name: str) -> EnvironmentSettings:
    found = await first_async(conn, state.engine.web.environment_settings(name))
    # An environment no run or setting has named yet has the defaults.
    return found or EnvironmentSettings(name, None, 1, False, None)  # type: ignore[arg-type]


async def _queue(state: WebState, conn: AsyncConn, environment: str, name: str) -> QueueSettings:
    found = await first_async(conn, state.engine.web.queue_settings(environment, name))
    return found or QueueSettings(environment, name, None, False, None)


async def _path_environment(request: Request) -> tuple[Caller, str]:
    caller = await authenticate(request)
    environment = request.path_params["environment"]
    caller.check_environment(environment)
    return caller, environment


async def overview(request: Request) -> JSONResponse:
    """Every queue the key sees, with its caps and counts; the scheduler for an admin key."""
    caller = await authenticate(request)
    state = state_of(request)
    async with state.connection() as conn:
        rows = await limits.limits_table_async(conn, schema=state.schema)
        scheduler = None
        if caller.is_admin:
            scheduler = await limits.scheduler_settings_async(conn, schema=state.schema)
    document: dict[str, Any] = {
        "queues": [limits_row_json(row) for row in rows if caller.sees(row["environment"])]
    }
    if scheduler is not None:
        document["scheduler"] = scheduler_json(scheduler)
    return JSONResponse(document)


async def get_environment(request: Request) -> JSONResponse:
    _caller, environment = await _path_environment(request)
    state = state_of(request)
    async with state.connection() as conn:
        settings = await _environment(state, conn, environment)
    return JSONResponse(environment_json(settings))


async def _set_environment(request: Request, changes: dict[str, Any]) -> JSONResponse:
    state = state_of(request)
    environment = request.path_params["environment"]
    settings: dict[str, Any] = {}
    for name in ("concurrency_limit", "size_limit"):
        if name in changes:
            settings[name] = changes[name]
    if changes.get("burst_factor") is not None:
        burst = changes["burst_factor"]
        if isinstance(burst, bool) or not isinstance(burst, int | float):
            raise ApiError(
                422, "SettingError", "burst_factor must be a number", setting="burst_factor"
            )
        settings["burst_factor"] = burst
    if "paused" in changes:
        settings["paused"] = changes["paused"]
    async with state.connection() as conn:
        updated = await limits.set_environment_async(
            conn, environment, schema=state.schema, **settings
        )
    return JSONResponse(environment_json(updated))


async def put_environment(request: Request) -> JSONResponse:
    await _path_environment(request)
    body = await read_object(request, state_of(request).max_body_bytes)
    return await _set_environment(request, _changes(body, ENVIRONMENT_FIELDS))


async def pause_environment(request: Request) -> JSONResponse:
    await _path_environment(request)
    return await _set_environment(request, {"paused": True})


async def resume_environment(request: Request) -> JSONResponse:
    await _path_environment(request)
    return await _set_environment(request, {"paused": False})


async def get_queue(request: Request) -> JSONResponse:
    _caller, environment = await _path_environment(request)
    state = state_of(request)
    async with state.connection() as conn:
        settings = await _queue(state, conn, environment, request.path_params["queue"])
    return JSONResponse(queue_json(settings))


async def _set_queue(request: Request, changes: dict[str, Any]) -> JSONResponse:
    state = state_of(request)
    environment, queue = request.path_params["environment"], request.path_params["queue"]
    async with state.connection() as conn:
        updated = await limits.set_queue_async(
            conn, environment, queue, schema=state.schema, **changes
        )
    return JSONResponse(queue_json(updated))


async def queue_keys(request: Request) -> JSONResponse:
    """The queue's busiest concurrency keys (``?top=`` how many, default 10)."""
    await _path_environment(request)
    state = state_of(request)
    top = request.query_params.get("top", "10")
    if not top.isdigit() or int(top) < 1:
        raise ApiError(422, "SettingError", "top must be a positive integer", setting="top")
    async with state.connection() as conn:
        rows = await limits.busiest_keys_async(
            conn,
            request.path_params["environment"],
            request.path_params["queue"],
            most=int(top),
            schema=state.schema,
        )
    return JSONResponse({"keys": rows})


async def put_queue(request: Request) -> JSONResponse:
    await _path_environment(request)
    body = await read_object(request, state_of(request).max_body_bytes)
    return await _set_queue(request, _changes(body, QUEUE_FIELDS))


async def pause_queue(request: Request) -> JSONResponse:
    await _path_environment(request)
    return await _set_queue(request, {"paused": True})


async def resume_queue(request: Request) -> JSONResponse:
    await _path_environment(request)
    return await _set_queue(request, {"paused": False})


async def get_scheduler(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    caller.require_admin()
    state = state_of(request)
    async with state.connection() as conn:
        settings = await limits.scheduler_settings_async(conn, schema=state.schema)
    return JSONResponse(scheduler_json(settings))


async def put_scheduler(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    caller.require_admin()
    state = state_of(request)
    body = _changes(await read_object(request, state.max_body_bytes), SCHEDULER_FIELDS)
    for name, value in body.items():
        whole = name in ("quantum", "max_deficit", "global_concurrency_limit")
        kinds: tuple[type, ...] = (int,) if whole else (int, float)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            wanted = "an integer" if whole else "a number"
            raise ApiError(422, "SettingError", f"{name} must be {wanted} or null", setting=name)
    async with state.connection() as conn:
        settings = await limits.set_scheduler_async(conn, schema=state.schema, **body)
    return JSONResponse(scheduler_json(settings))


ENV = "/environments/{environment}"
QUEUE = ENV + "/queues/{queue}"
routes = [
    Route("/limits", overview, methods=["GET"], name="limits"),
    Route(ENV + "/limits", get_environment, methods=["GET"], name="environment_limits"),
    Route(ENV + "/limits", put_environment, methods=["PUT"], name="set_environment_limits"),
    Route(ENV + "/pause", pause_environment, methods=["POST"], name="pause_environment"),
    Route(ENV + "/resume", resume_environment, methods=["POST"], name="resume_environment"),
    Route(QUEUE + "/limits", get_queue, methods=["GET"], name="queue_limits"),
    Route(QUEUE + "/limits", put_queue, methods=["PUT"], name="set_queue_limits"),
    Route(QUEUE + "/keys", queue_keys, methods=["GET"], name="queue_keys"),
    Route(QUEUE + "/pause", pause_queue, methods=["POST"], name="pause_queue"),
    Route(QUEUE + "/resume", resume_queue, methods=["POST"], name="resume_queue"),
    Route("/scheduler", get_scheduler, methods=["GET"], name="scheduler"),
    Route("/scheduler", put_scheduler, methods=["PUT"], name="set_scheduler"),
]
