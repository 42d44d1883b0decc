"""Who may follow what: a realtime token (``Authorization: Bearer flrt_...`` or, for a browser's
``EventSource``, which cannot send headers, ``?access_token=flrt_...``) or an API key in the
header. An API key is never taken from the query string: query strings end up in histories and
proxies' logs, and a token only reads one thing for at most a day."""

from __future__ import annotations

from starlette.requests import Request

from fairlane import control
from fairlane.engine.statement import drive_async, first_async
from fairlane.errors import RunNotFoundError
from fairlane.models import Run
from fairlane.web.auth import state_of, unauthorized
from fairlane.web.errors import ApiError
from fairlane.web.realtime.inbox import Scope
from fairlane.web.realtime.tokens import TOKEN_SECRET, is_token, verify
from fairlane.web.state import AsyncConn, WebState

QUERY_TOKEN = "access_token"


def presented_token(request: Request) -> str | None:
    """The realtime token the request carries, if it carries one rather than a key."""
    query = request.query_params.get(QUERY_TOKEN)
    if query is not None:
        if not is_token(query):
            raise unauthorized(f"{QUERY_TOKEN} takes a realtime token, never an API key")
        return query
    header = request.headers.get("authorization", "")
    scheme, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() == "bearer" and is_token(credential):
        return credential
    return None


async def token_scope(request: Request) -> Scope | None:
    """The scope of the request's realtime token (401 if forged or expired), or None."""
    presented = presented_token(request)
    if presented is None:
        return None
    state = state_of(request)
    return verify(await state.secret(TOKEN_SECRET), presented)


def outside(scope: Scope) -> ApiError:
    return ApiError(
        403, "Forbidden", f"this realtime token only reads {scope.kind} {scope.target!r}"
    )


async def scoped_run(state: WebState, conn: AsyncConn, scope: Scope, run_id: int) -> Run:
    """The run, read with a realtime token: 404 if it is not of the token's environment (as
    a missing one), 403 if it is but lies outside the token's run, tag or batch."""
    run = await drive_async(conn, control.get_run(state.engine, run_id))
    if not scope.covers(run.environment):
        raise RunNotFoundError(run_id)
    if scope.kind == "run":
        inside = run.id == scope.target
    elif scope.kind == "tag":
        inside = scope.target in run.tags
    else:
        link = await first_async(conn, state.engine.web.run_batch(run_id))
        inside = link is not None and link["batch_id"] == scope.target
    if not inside:
        raise outside(scope)
    return run
