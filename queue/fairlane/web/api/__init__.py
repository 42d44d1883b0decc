"""The JSON API under /api/v1, one module per resource."""

from __future__ import annotations

from starlette.routing import BaseRoute

from fairlane.web.api import (
    batches,
    bulk,
    limits,
    openapi,
    realtime,
    realtime_tokens,
    runs,
    tasks,
    tokens,
    workers,
)


def routes() -> list[BaseRoute]:
    return [
        *tasks.routes,
        *realtime.routes,
        *runs.routes,
        *bulk.routes,
        *tokens.routes,
        *realtime_tokens.routes,
        *batches.routes,
        *limits.routes,
        *workers.routes,
        *openapi.routes,
    ]
