"""Request bodies: JSON read with a bound, query parameters checked.

A JSON body is refused (413) without being held whole: a ``Content-Length`` over the bound is
refused before a byte is read, and a body sent without one (chunked) is counted as it arrives
and refused as soon as it passes the bound. NDJSON batch items are not read here: they are
streamed to ``ingest_items``, a line at a time.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from fairlane.web.errors import ApiError

# Ids are bigint: a larger number names nothing.
MAX_ID = 2**63 - 1


def too_large(limit: int) -> ApiError:
    return ApiError(413, "BodyTooLarge", f"request body over {limit} bytes", limit=limit)


async def read_json(request: Request, limit: int, *, required: bool = True) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "BadRequest", "Content-Length is not a number")
        if int(declared) > limit:
            raise too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    if not body.strip():
        if required:
            raise ApiError(400, "BadRequest", "a JSON body is required")
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ApiError(400, "BadRequest", f"the body is not valid JSON: {error}") from None
    except RecursionError:
        raise ApiError(400, "BadRequest", "the body nests too deeply") from None


async def read_object(request: Request, limit: int, *, required: bool = True) -> dict[str, Any]:
    """A JSON object body (an absent body is ``{}`` unless ``required``)."""
    document = await read_json(request, limit, required=required)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    return document


def int_param(request: Request, name: str, default: int | None = None, *,
              low: int | None = None, high: int | None = None) -> int | None:  # fmt: skip
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, "BadRequest", f"{name} must be an integer", parameter=name) from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ApiError(
            400, "BadRequest", f"{name} must be between {low} and {high}", parameter=name
        )
    return value


def path_id(request: Request, name: str = "id") -> int:
    value = request.path_params[name]
    if not isinstance(value, int) or value > MAX_ID:
        raise ApiError(404, "NotFound", f"no such {name}")
    return value
