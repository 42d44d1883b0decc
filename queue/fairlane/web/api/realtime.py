"""Event streams (Server-Sent Events, fairlane.web.realtime.stream): a run's, a tag's, a
batch's, each under an API key or a realtime token of its scope.

An environment key follows its environment's runs, tags and batches only: another's run or
batch answers 404, as an id that does not exist, and a tag stream shows the key's environment's
runs alone. An admin key follows any (a tag in every environment, or the one named by
``?environment=``). ``?once=1`` sends the current state and ends: a poll in the same format.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairlane.batches.api import get_batch_async
from fairlane.errors import BatchNotFoundError
from fairlane.web.api.runs import visible_run
from fairlane.web.auth import Caller, authenticate, state_of
from fairlane.web.errors import ApiError
from fairlane.web.params import path_id
from fairlane.web.realtime.access import outside, token_scope
from fairlane.web.realtime.inbox import Kind, Scope
from fairlane.web.realtime.stream import EventStream

MAX_TAG_CHARS = 128


def _once(request: Request) -> bool:
    value = request.query_params.get("once", "0")
    if value not in ("0", "1", "true", "false"):
        raise ApiError(400, "BadRequest", "once is 1 or 0", parameter="once")
    return value in ("1", "true")


def _tag(request: Request) -> str:
    tag = request.path_params["tag"]
    if not 1 <= len(tag) <= MAX_TAG_CHARS:
        raise ApiError(
            400, "BadRequest", f"a tag is 1 to {MAX_TAG_CHARS} characters", parameter="tag"
        )
    return str(tag)


async def _keyed_scope(request: Request, caller: Caller, kind: Kind, target: int | str) -> Scope:
    """What an API key may follow: the run or batch if it sees it (404 as missing), the tag
    in its environment."""
    state = state_of(request)
    environment = caller.key.environment
    if kind == "tag":
        named = request.query_params.get("environment") or None
        return Scope(kind, target, caller.environment(named) if named else environment)
    async with state.connection() as conn:
        if kind == "run":
            await visible_run(state, conn, caller, int(target))
        else:
            batch = await get_batch_async(conn, int(target), schema=state.schema)
            if not caller.sees(batch.environment):
                raise BatchNotFoundError(int(target))
    return Scope(kind, target, environment)


async def _stream(request: Request, kind: Kind, target: int | str) -> Response:
    once = _once(request)
    scope = await token_scope(request)
    if scope is not None:
        if (scope.kind, scope.target) != (kind, target):
            raise outside(scope)
    else:
        scope = await _keyed_scope(request, await authenticate(request), kind, target)
    state = state_of(request)
    return EventStream(state, scope, state.streams.hold(scope.environment), once=once)


async def run_events(request: Request) -> Response:
    return await _stream(request, "run", path_id(request))


async def tag_events(request: Request) -> Response:
    return await _stream(request, "tag", _tag(request))


async def batch_events(request: Request) -> Response:
    return await _stream(request, "batch", path_id(request))


routes = [
    Route("/runs/{id:bigint}/events", run_events, methods=["GET"], name="run_events"),
    Route("/tags/{tag:path}/events", tag_events, methods=["GET"], name="tag_events"),
    Route("/batches/{id:bigint}/events", batch_events, methods=["GET"], name="batch_events"),
]
