"""JSON as the database can store it, refused with the path of the first value it cannot.

Python's ``json`` reads more than ``jsonb`` (and the columns behind it) takes: ``NaN`` and
``Infinity``, ``1e400`` (read as infinity), integers past 4,300 digits (a ``ValueError``
without a position), ``\\u0000`` (jsonb and text refuse NUL) and lone surrogates such as
``\\ud800`` (not encodable as UTF-8). Each would fail later, deep in a statement; here it is
refused at once as a 422 that names where it was (``options.priority``, ``items[2].payload``).

Numbers are checked as they are read; strings only when the body holds a ``\\u`` escape, the
one way JSON text can carry a NUL or a lone surrogate, so a plain body costs no second pass.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fairlane.web.errors import ApiError

# A NUL or a surrogate (D800-DFFF) can only arrive escaped; a paired surrogate is fine, and is
# told apart from a lone one by the walk, which this only decides to run.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


class _Refused:
    """A number read but not kept: its place in the document, until the walk names it."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which the database cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone surrogate (not valid Unicode)"
    return None


def _name(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _first_problem(document: Any) -> tuple[str, str] | None:
    """The path and reason of the first value the database cannot take, depth first."""
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Refused):
            return path or "body", value.reason
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem:
                return path or "body", problem
        elif isinstance(value, dict):
            for key in reversed(list(value)):
                problem = _text_problem(key)
                if problem:
                    return _name(path, repr(key)), "a key that " + problem
                stack.append((_name(path, key), value[key]))
        elif isinstance(value, list):
            stack.extend((_name(path, i), item) for i, item in reversed(list(enumerate(value))))
    return None


def parse(body: bytes) -> Any:
    """The document in ``body``, or ``ApiError`` 400 (not JSON) or 422 naming the value."""
    refused: list[_Refused] = []

    def refuse(reason: str) -> _Refused:
        marker = _Refused(reason)
        refused.append(marker)
        return marker

    def whole(text: str) -> int | _Refused:
        try:
            return int(text)
        except ValueError:  # past sys.get_int_max_str_digits()
            return refuse(f"an integer of {len(text)} characters is too long to read")

    def real(text: str) -> float | _Refused:
        value = float(text)
        return value if math.isfinite(value) else refuse(f"{text} is out of range of a number")

    def constant(text: str) -> _Refused:
        return refuse(f"{text} is not a JSON number")

    try:
        # UTF-8 only (RFC 8259): json.loads would take UTF-16 too, lone surrogates and all.
        text = body.decode("utf-8-sig")
        document = json.loads(text, parse_int=whole, parse_float=real, parse_constant=constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ApiError(400, "BadRequest", f"the body is not valid JSON: {error}") from None
    except RecursionError:
        raise ApiError(400, "BadRequest", "the body nests too deeply") from None
    if refused or _SUSPECT_ESCAPE.search(text):
        problem = _first_problem(document)
        if problem is not None:
            field, reason = problem
            raise ApiError(422, "BadRequest", f"{field}: {reason}", field=field)
    return document
