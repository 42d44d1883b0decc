"""The app's own access log (``fairlane.web.access``) and its entry point in the scope.

One line per request: method, path, status, time. Never a header (the API key travels in
``Authorization``), never the query string, and a token callback's signature (a credential in
the path) is masked. ``fairlane serve`` turns uvicorn's access log off in favour of this one.
"""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairlane.web.urls import ROOT

log = logging.getLogger("fairlane.web.access")
_CALLBACK = re.compile(r"(/tokens/\d+/callback/)[^/]+")


def masked(path: str) -> str:
    return _CALLBACK.sub(r"\1***", path)


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope[ROOT] = scope.get("root_path", "")
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "%s %s %d %.1fms",
                    scope.get("method", "WS"),
                    masked(scope["path"]),
                    status,
                    (time.perf_counter() - started) * 1000,
                )
