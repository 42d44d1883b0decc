"""Errors as HTTP answers: a status code and a JSON body
``{"error": {"type", "message", ...details}}``.

A typed error of ``fairlane.errors`` answers its category's status
(``fairlane.errors_policy``, the table the CLI's exit codes come from too); ``ApiError`` is the
web layer's own (bad body, no key, not found, ...).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from fairlane import errors as e
from fairlane.errors_policy import POLICIES, http_status


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = headers
        self.details = details


def not_found(what: str, ident: object) -> ApiError:
    return ApiError(404, "NotFound", f"{what} {ident} does not exist", id=ident)


# Attributes of typed errors worth a client's reading, by name.
DETAILS = (
    "option",
    "index",
    "line",
    "run_id",
    "batch_id",
    "waitpoint_id",
    "environment",
    "queue",
    "limit",
    "scope",
    "size",
    "status",
    "setting",
    "retry_after_s",
    "run_count",
    "max_items",
    "reason",
    "accepted",
    "received",
    "idle_timeout_s",
)


def error_response(
    status: int,
    kind: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": kind, "message": message, **(details or {})}}
    return JSONResponse(body, status_code=status, headers=headers)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def fairlane_error(error: e.FairlaneError) -> JSONResponse:
    if isinstance(error, e.UnavailableError):
        # Its message may name the server's address: the caller learns only to try again.
        return unavailable_response()
    status = http_status(error)
    details = {
        name: _plain(getattr(error, name))
        for name in DETAILS
        if name != "status" and getattr(error, name, None) is not None
    }
    if isinstance(error, e.RunStateError):
        details["run_status"] = error.status
    headers = None
    if isinstance(error, e.BatchRateLimitedError) and error.retry_after_s is not None:
        headers = {"Retry-After": str(max(1, int(error.retry_after_s + 0.999)))}
    return error_response(status, type(error).__name__, str(error), details, headers)


async def handle_fairlane_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, e.FairlaneError)
    return fairlane_error(error)


def is_api(request: Request) -> bool:
    from fairlane.web.urls import root

    return request.url.path.startswith(root(request) + "/api/")


def html_error(
    request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
) -> HTMLResponse:
    """The dashboard's side of an error: a small page, for a person, not a JSON client."""
    from fairlane.web.urls import root

    home = html.escape(root(request))
    return HTMLResponse(
        f"<!doctype html><title>{status}</title><p>{status}: {html.escape(message)}</p>"
        f'<p><a href="{home}/">fairlane</a></p>',
        status_code=status,
        headers=headers,
    )


def answer(
    request: Request,
    status: int,
    kind: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """JSON under /api/, a page elsewhere (the dashboard)."""
    if is_api(request):
        return error_response(status, kind, message, details, headers)
    return html_error(request, status, message, headers)


async def handle_api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return answer(request, error.status, error.kind, error.message, error.details, error.headers)


async def handle_http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status_code, "HTTPError")
    return answer(request, error.status_code, kind, str(error.detail), headers=error.headers)


def unavailable_response() -> JSONResponse:
    status = POLICIES[e.UnavailableError].http_status
    message = "the database is not reachable now; try again"
    return error_response(status, "DatabaseUnavailable", message, headers={"Retry-After": "1"})


async def handle_database_unavailable(request: Request, error: Exception) -> Response:
    """The database cannot be reached (or the pool had no connection in time): 503."""
    return unavailable_response()
