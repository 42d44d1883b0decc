"""``POST /api/v1/realtime-tokens``: a read-only token scoped to one run, tag or batch
(fairlane.web.realtime.tokens), for a backend to hand to a browser.

The body names exactly one of ``run_id``, ``tag``, ``batch_id``, and optionally a
``lifetime`` in seconds (default an hour, at most a day). The run or batch must be one the
key sees (else 404, as an id that does not exist) and the token is for its environment; a
tag's token is for the key's environment (an admin key names one: ``environment``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane.web.api.batches import visible_batch
from fairlane.web.api.realtime import MAX_TAG_CHARS
from fairlane.web.api.runs import visible_run
from fairlane.web.auth import Caller, authenticate, state_of
from fairlane.web.bodies import read_object
from fairlane.web.errors import ApiError
from fairlane.web.params import MAX_ID
from fairlane.web.realtime.inbox import Scope
from fairlane.web.realtime.tokens import TOKEN_SECRET, issue, lifetime

FIELDS = ("run_id", "tag", "batch_id")
USAGE = 'the body is {"run_id": id} or {"tag": tag} or {"batch_id": id}, and maybe "lifetime"'


def _id(body: dict[str, Any], name: str) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise ApiError(422, "BadRequest", f"{name} must be a run id (1 to {MAX_ID})", field=name)
    return value


def _tag(body: dict[str, Any]) -> str:
    tag = body["tag"]
    if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_TAG_CHARS:
        raise ApiError(
            422,
            "BadRequest",
            f"tag must be a string of 1 to {MAX_TAG_CHARS} characters",
            field="tag",
        )
    return tag


async def _scope(request: Request, caller: Caller, body: dict[str, Any]) -> Scope:
    named = [name for name in FIELDS if name in body]
    unknown = set(body) - {*FIELDS, "lifetime", "environment"}
    if unknown:
        raise ApiError(422, "BadRequest", USAGE, field=sorted(unknown)[0])
    if len(named) != 1:
        raise ApiError(422, "BadRequest", USAGE)
    state = state_of(request)
    if named == ["tag"]:
        return Scope("tag", _tag(body), caller.environment(body.get("environment")))
    if "environment" in body:
        raise ApiError(
            422,
            "BadRequest",
            "a run's or batch's token is for its own environment",
            field="environment",
        )
    async with state.connection() as conn:
        if named == ["run_id"]:
            run = await visible_run(state, conn, caller, _id(body, "run_id"))
            return Scope("run", run.id, run.environment)
        batch = await visible_batch(state, conn, caller, _id(body, "batch_id"))
        return Scope("batch", batch.id, batch.environment)


async def create_realtime_token(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    body = await read_object(request, state.max_body_bytes)
    lifetime_s = lifetime(body.get("lifetime"))
    scope = await _scope(request, caller, body)
    issued = issue(await state.secret(TOKEN_SECRET), scope, lifetime_s)
    target = {"run": "run_id", "tag": "tag", "batch": "batch_id"}[scope.kind]
    return JSONResponse(
        {
            "token": issued.token,
            "expires_at": datetime.fromtimestamp(issued.expires_at, UTC).isoformat(),
            "environment": scope.environment,
            target: scope.target,
        },
        status_code=201,
    )


routes = [
    Route("/realtime-tokens", create_realtime_token, methods=["POST"], name="realtime_tokens"),
]
