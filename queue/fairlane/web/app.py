"""``create_app``: the ASGI app of the HTTP API (/api/v1) and the dashboard (/).

Starlette, not FastAPI (docs/decisions.md, "HTTP API"): routes are plain functions over the
library's operations, the OpenAPI document is written by hand, and the app mounts inside a
FastAPI or Starlette app as it is::

    from starlette.routing import Mount
    from fairlane.web import create_app

    fairlane_app = create_app(dsn, schema="fairlane")
    app = Starlette(routes=[Mount("/fairlane", app=fairlane_app)])

A mounted app gets no lifespan events: its connection pool opens on the first request, and
the host app closes it with ``await fairlane_app.state.fairlane.close()`` at shutdown
(``fairlane serve`` does it in the lifespan).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount

from fairlane.errors import FairlaneError
from fairlane.web import api
from fairlane.web.access import AccessLog
from fairlane.web.errors import (
    ApiError,
    error_response,
    handle_api_error,
    handle_database_unavailable,
    handle_fairlane_error,
    handle_http_exception,
)
from fairlane.web.headers import SecurityHeaders
from fairlane.web.params import CheckedText
from fairlane.web.realtime.settings import StreamSettings
from fairlane.web.state import DEFAULT_POOL_SIZE, DEFAULT_SESSION_IDLE_S, WebState

log = logging.getLogger("fairlane.web")


async def _internal_error(request: Request, error: Exception) -> Response:
    log.error(
        "%s %s failed: %s",
        request.method,
        request.url.path,
        type(error).__name__,
        exc_info=error,
    )
    return error_response(500, "InternalError", "the server failed to answer this request")


async def _client_gone(request: Request, error: Exception) -> Response:
    # A client that closes its connection mid-body (a stalled upload given up) is no failure
    # of the server's; the answer reaches nobody, the access log records it.
    log.info("%s %s: the client closed the connection", request.method, request.url.path)
    return error_response(400, "ClientDisconnect", "the client closed the connection")


def create_app(
    dsn: str | None = None,
    schema: str | None = None,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    max_body_bytes: int | None = None,
    dashboard: bool = True,
    session_idle: float | None = None,
    upload_idle_timeout: float | None = None,
    uploads_per_environment: int | None = None,
    streams: StreamSettings | None = None,
) -> Starlette:
    """The app for the database at ``dsn`` (default ``DATABASE_URL``) and fairlane's
    ``schema``. ``max_body_bytes`` bounds JSON request bodies (default 8 MiB);
    ``upload_idle_timeout`` (seconds, default 30) ends an NDJSON upload that sends nothing for
    that long, ``uploads_per_environment`` (default 4) caps each environment's concurrent
    uploads in this process; a dashboard session idle for ``session_idle`` seconds (default 30
    minutes) has ended; ``streams`` sets the event streams' heartbeat, lifetime and caps
    (``fairlane.web.realtime.settings``); ``dashboard=False`` serves the API alone."""
    state = WebState(
        dsn,
        schema,
        pool_size=pool_size,
        max_body_bytes=max_body_bytes,
        session_idle_s=DEFAULT_SESSION_IDLE_S if session_idle is None else session_idle,
        upload_idle_timeout=upload_idle_timeout,
        uploads_per_environment=uploads_per_environment,
        streams=streams,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await state.close()

    routes: list[BaseRoute] = [Mount("/api/v1", routes=api.routes())]
    if dashboard:
        from fairlane.web.dashboard import routes as dashboard_routes

        routes += dashboard_routes()
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AccessLog), Middleware(SecurityHeaders), Middleware(CheckedText)],
        exception_handlers={
            FairlaneError: handle_fairlane_error,
            ApiError: handle_api_error,
            HTTPException: handle_http_exception,
            psycopg.OperationalError: handle_database_unavailable,
            PoolTimeout: handle_database_unavailable,
            ClientDisconnect: _client_gone,
            Exception: _internal_error,
        },
        lifespan=lifespan,
    )
    app.state.fairlane = state
    return app
