"""The JSON API under /api/v1, one module per resource."""

from __future__ import annotations

from starlette.routing import BaseRoute

from fairlane.web.api import batches, limits, openapi, runs, tasks, tokens, workers


def routes() -> list[BaseRoute]:
    return [
        *tasks.routes,
        *runs.routes,
        *tokens.routes,
        *batches.routes,
        *limits.routes,
        *workers.routes,
        *openapi.routes,
    ]
