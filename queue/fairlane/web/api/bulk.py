"""Bulk retry and cancel over a filter: ``POST /api/v1/runs/retry`` and ``/runs/cancel`` with
the filters of ``GET /api/v1/runs`` as query parameters. A key that is not an admin key acts
only in its own environment (naming another one is 403, as for the list). ``dry_run=true``
changes nothing and answers how many runs match and the ``before_id`` that holds the action to
exactly those (the newest matching id plus one): pass it back to act on the runs counted and
none created since. With no filter of the caller's own (the key's environment is not one) the
action takes every run the key sees only with ``all=true``. One statement per page of runs
(fairlane.control.retry_many, cancel_many)."""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane import control
from fairlane.engine.statement import drive_async
from fairlane.web.api.runs import run_filter
from fairlane.web.auth import authenticate, state_of
from fairlane.web.errors import ApiError


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "").strip().lower()
    if value not in ("", "true", "false", "1", "0"):
        raise ApiError(400, "BadRequest", f"{name} is true or false", parameter=name)
    return value in ("true", "1")


async def _bulk(request: Request, what: str) -> JSONResponse:
    caller = await authenticate(request)
    state = state_of(request)
    filters = run_filter(request, caller)
    own = filters if caller.is_admin else replace(filters, environment=None)
    if own.is_empty and not _flag(request, "all"):
        raise ApiError(
            422, "BadRequest", f"give a filter, or all=true to {what} every run the key sees"
        )
    async with state.connection() as conn:
        if _flag(request, "dry_run"):
            newest = await drive_async(
                conn, control.list_runs(state.engine, replace(filters, limit=1))
            )
            matching = await drive_async(conn, control.count_matching(state.engine, filters))
            ceiling = newest[0].id + 1 if newest else None
            return JSONResponse({"matching": matching, "before_id": ceiling})
        act = control.retry_many if what == "retry" else control.cancel_many
        result = await drive_async(conn, act(state.engine, filters))
    return JSONResponse(
        {"matched": result.matched, "changed": result.changed, "unchanged": result.unchanged}
    )


async def retry_runs(request: Request) -> JSONResponse:
    return await _bulk(request, "retry")


async def cancel_runs(request: Request) -> JSONResponse:
    return await _bulk(request, "cancel")


routes = [
    Route("/runs/retry", retry_runs, methods=["POST"], name="retry_runs"),
    Route("/runs/cancel", cancel_runs, methods=["POST"], name="cancel_runs"),
]
