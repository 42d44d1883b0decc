"""JSON encoding that refuses, before anything is written, what jsonb cannot hold."""

from __future__ import annotations

import json
import re
from typing import Any

from fairlane.errors import PayloadError

# An escaped NUL that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode_json(value: Any, *, what: str = "payload", index: int | None = None) -> str:
    """Serialise ``value`` for a jsonb column, or raise ``PayloadError`` saying why not."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise PayloadError(f"{what} is not JSON-serialisable: {error}", index=index) from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise PayloadError(
            f"{what} contains a NUL character (\\u0000), which jsonb cannot store", index=index
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PayloadError(f"{what} is not valid Unicode: {error.reason}", index=index) from None
    return text
