"""Tokens: waitpoints that code completes by hand, made and completed over HTTP.

``POST /api/v1/tokens`` makes one in the key's environment (``idempotency_key``,
``idempotency_ttl``, ``timeout``) and answers its id and a ``callback_url``: another system
completes the token by POSTing its output (any JSON, or nothing) there, without an API key;
the URL's signature (HMAC-SHA256 of the id under the app's secret) is the credential. With a
key, ``POST /api/v1/tokens/{id}/complete`` ``{"output": ...}`` does the same.

Idempotency keys are scoped by environment (two environments' equal keys make two tokens).
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane.durations import seconds
from fairlane.engine.statement import first_async, one_async
from fairlane.errors import TokenNotFoundError
from fairlane.models import Token
from fairlane.waitpoints.tokens import DEFAULT_TOKEN_KEY_TTL_S, complete_token_async
from fairlane.web.auth import (
    Caller,
    authenticate,
    callback_signature,
    state_of,
    unauthorized,
)
from fairlane.web.bodies import read_json, read_object
from fairlane.web.errors import ApiError
from fairlane.web.params import path_id
from fairlane.web.serialize import token_json
from fairlane.web.state import AsyncConn, WebState
from fairlane.web.urls import app_url

CREATE_FIELDS = {"idempotency_key", "idempotency_ttl", "timeout", "environment"}


def scoped_key(environment: str, key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or "\x00" in key:
        raise ApiError(
            422,
            "TriggerOptionError",
            "idempotency_key must be a non-empty string",
            option="idempotency_key",
        )
    return f"env:{len(environment)}:{environment}:{key}"


async def visible_token(state: WebState, conn: AsyncConn, caller: Caller, token_id: int) -> Token:
    token = await first_async(conn, state.engine.waits.get_token(token_id))
    if token is None or not caller.sees(token.environment):
        raise TokenNotFoundError(token_id)
    return token


async def _document(request: Request, state: WebState, token: Token) -> dict[str, Any]:
    signature = await callback_signature(state, token.id)
    return {
        **token_json(token),
        "callback_url": app_url(request, f"/api/v1/tokens/{token.id}/callback/{signature}"),
    }


async def create_token(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    body = await read_object(request, state.max_body_bytes, required=False)
    unknown = sorted(set(body) - CREATE_FIELDS)
    if unknown:
        raise ApiError(422, "BadRequest", f"unknown field {unknown[0]!r}", field=unknown[0])
    environment = caller.environment(body.get("environment"))
    key = scoped_key(environment, body.get("idempotency_key"))
    key_ttl_s = seconds("idempotency_ttl", body.get("idempotency_ttl")) or DEFAULT_TOKEN_KEY_TTL_S
    timeout_s = seconds("timeout", body.get("timeout"))
    async with state.connection() as conn:
        made = await one_async(
            conn, state.engine.web.create_token(environment, key, key_ttl_s, timeout_s)
        )
        token = await visible_token(state, conn, caller, made.id)
    return JSONResponse(await _document(request, state, token), status_code=201)


async def get_token(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    async with state.connection() as conn:
        token = await visible_token(state, conn, caller, path_id(request))
    return JSONResponse(await _document(request, state, token))


async def _complete(state: WebState, conn: AsyncConn, token_id: int, output: Any) -> bool:
    return await complete_token_async(conn, token_id, output, schema=state.schema)


async def complete_token(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    token_id = path_id(request)
    body = await read_object(request, state.max_body_bytes, required=False)
    if set(body) - {"output"}:
        raise ApiError(422, "BadRequest", 'the body is {"output": any JSON}')
    async with state.connection() as conn:
        await visible_token(state, conn, caller, token_id)
        completed = await _complete(state, conn, token_id, body.get("output"))
    return JSONResponse({"id": token_id, "completed": completed})


async def token_callback(request: Request) -> JSONResponse:
    """The callback URL: the signature is the credential; the body is the output."""
    state = state_of(request)
    token_id = path_id(request)
    expected = await callback_signature(state, token_id)
    given = str(request.path_params["signature"])
    # compare_digest takes ASCII strings only; a signature is hex, so anything else is wrong.
    if not given.isascii() or not hmac.compare_digest(expected, given):
        refused = unauthorized("the callback signature does not match")
        refused.details["parameter"] = "signature"
        raise refused
    output = await read_json(request, state.max_body_bytes, required=False)
    async with state.connection() as conn:
        token = await first_async(conn, state.engine.waits.get_token(token_id))
        if token is None:
            raise TokenNotFoundError(token_id)
        completed = await _complete(state, conn, token_id, output)
    return JSONResponse({"id": token_id, "completed": completed})


routes = [
    Route("/tokens", create_token, methods=["POST"], name="create_token"),
    Route("/tokens/{id:bigint}", get_token, methods=["GET"], name="get_token"),
    Route("/tokens/{id:bigint}/complete", complete_token, methods=["POST"], name="complete_token"),
    Route(
        "/tokens/{id:bigint}/callback/{signature}",
        token_callback,
        methods=["POST"],
        name="token_callback",
    ),
]
