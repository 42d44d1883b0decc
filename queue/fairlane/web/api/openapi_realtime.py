"""The realtime part of the OpenAPI document: the event streams and realtime tokens
(fairlane.web.api.realtime, fairlane.web.api.realtime_tokens)."""

from __future__ import annotations

from typing import Any

from fairlane.web.api.openapi import ID, body, operation, path_param, query
from fairlane.web.realtime.tokens import MAX_LIFETIME_S

STREAM_PARAMETERS = [
    query("once", {"type": "string", "enum": ["0", "1"]}, "1: the current state, then end"),
    query("access_token", {"type": "string"}, "a realtime token (for EventSource)"),
]
EVENTS = (
    "Server-Sent Events: run (a run first seen), status (the run, on a status change), "
    "metadata ({id, metadata}), result ({id, status, result, error}), end; ': keep-alive' "
    "comments in silence"
)


def _stream(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    documented = operation(
        f"{summary}. {EVENTS}",
        {"type": "string"},
        400,
        403,
        404,
        429,
        parameters=parameters + STREAM_PARAMETERS,
        tag="realtime",
    )
    documented["responses"]["200"] = {
        "description": "an event stream",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    return documented


TOKEN_BODY = {
    "type": "object",
    "properties": {
        "run_id": ID,
        "tag": {"type": "string", "minLength": 1, "maxLength": 128},
        "batch_id": ID,
        "environment": {"type": "string"},
        "lifetime": {"type": "number", "minimum": 1, "maximum": MAX_LIFETIME_S},
    },
}
TOKEN = {
    "type": "object",
    "properties": {
        "token": {"type": "string"},
        "expires_at": {"type": "string", "format": "date-time"},
        "environment": {"type": "string"},
    },
}


def paths() -> dict[str, Any]:
    return {
        "/runs/{id}/events": {
            "get": _stream("Follow one run until it ends", [path_param("id", ID)])
        },
        "/tags/{tag}/events": {
            "get": _stream(
                "Follow the runs with a tag",
                [
                    path_param("tag", {"type": "string", "minLength": 1, "maxLength": 128}),
                    query("environment", {"type": "string"}, "an admin key's environment"),
                ],
            )
        },
        "/batches/{id}/events": {"get": _stream("Follow a batch's runs", [path_param("id", ID)])},
        "/realtime-tokens": {
            "post": operation(
                "A read-only token for one run, tag or batch (one of run_id, tag, batch_id), "
                "to hand to a browser",
                TOKEN,
                400,
                403,
                404,
                413,
                422,
                ok=201,
                request_body=body(TOKEN_BODY),
                tag="realtime",
            )
        },
    }
