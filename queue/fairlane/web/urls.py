"""Absolute URLs inside the app, wherever it is mounted.

The app records the root path it was entered at (``ROOT``: the mount prefix, "" when served
alone) in the scope, so links and callback URLs carry the host app's prefix.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

ROOT = "fairlane.root"


def root(request: HTTPConnection) -> str:
    return str(request.scope.get(ROOT, "")).rstrip("/")


def app_url(request: HTTPConnection, path: str) -> str:
    """``path`` (from the app's root, starting with /) as an absolute URL."""
    return str(request.url.replace(path=root(request) + path, query="", fragment=""))
