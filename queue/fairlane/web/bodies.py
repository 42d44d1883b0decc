"""Request bodies: JSON read with a bound, and only what the database can store.

A JSON body is refused (413) without being held whole: a ``Content-Length`` over the bound is
refused before a byte is read, and a body sent without one (chunked) is counted as it arrives
and refused as soon as it passes the bound. NDJSON batch items are not read here: they are
streamed to ``ingest_stream``, a line at a time. What the document may hold is
``strict_json``'s to say.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from fairlane.web import strict_json
from fairlane.web.errors import ApiError


def too_large(limit: int) -> ApiError:
    return ApiError(413, "BodyTooLarge", f"request body over {limit} bytes", limit=limit)


async def read_json(request: Request, limit: int, *, required: bool = True) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise ApiError(400, "BadRequest", "Content-Length is not a number")
        if len(declared) > 18 or int(declared) > limit:
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
    return strict_json.parse(bytes(body))


async def read_object(request: Request, limit: int, *, required: bool = True) -> dict[str, Any]:
    """A JSON object body (an absent body is ``{}`` unless ``required``)."""
    document = await read_json(request, limit, required=required)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    return document
