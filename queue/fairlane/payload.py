"""JSON encoding that refuses, before anything is written, what jsonb cannot hold."""

from __future__ import annotations

import json
import re
from typing import Any

from fairlane.errors import PayloadError

# An escaped NUL that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# Most levels of arrays and objects a payload or metadata value may nest (``{"a": [1]}`` is
# two). Far more than documents need, and well inside what the encoder, PostgreSQL's JSON
# parser and a worker's decoder handle in any stack; deeper input is refused as such instead of
# failing somewhere along the way (RecursionError, "stack depth limit exceeded").
MAX_JSON_DEPTH = 100

# One encoder for every call (json.dumps with options builds a new one each time).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_json(value: Any, *, what: str = "payload", index: int | None = None) -> str:
    """Serialise ``value`` for a jsonb column, or raise ``PayloadError`` saying why not."""
    too_deep = f"{what} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise PayloadError(too_deep, index=index) from None
    except (TypeError, ValueError) as error:
        raise PayloadError(f"{what} is not JSON-serialisable: {error}", index=index) from None
    if _deeper_than(value, text, MAX_JSON_DEPTH):
        raise PayloadError(too_deep, index=index)
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise PayloadError(
            f"{what} contains a NUL character (\\u0000), which jsonb cannot store", index=index
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PayloadError(f"{what} is not valid Unicode: {error.reason}", index=index) from None
    return text


# A tuple, not ``dict | list | tuple`` written in the call: that builds the union every time,
# and every trigger request's checks pass here.
_CONTAINERS = (dict, list, tuple)


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests more than ``limit`` arrays and objects (walks only containers
    that hold containers: a flat payload costs one look at its values)."""
    if not isinstance(value, _CONTAINERS):
        return False
    return _walk_deeper_than(value, limit)


def _deeper_than(value: Any, text: str, limit: int) -> bool:
    """Whether ``value`` (encoded as ``text``) nests more than ``limit`` arrays and objects."""
    # Each level opens one bracket, so text with few of them (most payloads) needs no walk;
    # counting is C speed, the walk is not.
    if not isinstance(value, _CONTAINERS) or text.count("[") + text.count("{") <= limit:
        return False
    return _walk_deeper_than(value, limit)


def _walk_deeper_than(value: Any, limit: int) -> bool:
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        pending.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return False
