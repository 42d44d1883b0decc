"""Path and query values: text the database can store, integers within their column.

``CheckedText`` runs before routing, for the API and the dashboard alike: a NUL in the path or
in a query parameter (``?task=a%00b``) is refused with a 400 naming the parameter, since no
text column can hold one. Ids in paths are ``{id:bigint}`` (starlette's ``int`` converts any
length, and a 5,000-digit one fails), and ``path_id`` answers 404 past bigint. ``int_param``
reads a query integer, ASCII digits only (``str.isdigit`` takes ``²``, which ``int`` refuses;
``int`` takes other scripts' digits and ``1_0``), and within ``low..high``.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from fairlane.web.errors import ApiError, answer

# Ids are bigint: a larger number names nothing.
MAX_ID = 2**63 - 1
INT32_MAX = 2**31 - 1


class BigintConvertor(Convertor[int]):
    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        digits = value.lstrip("0") or "0"
        # Past 19 digits it cannot be an id: it stands for "past bigint", which ``path_id``
        # answers 404 naming the parameter, never read (a 5,000-digit one fails to convert).
        return int(digits) if len(digits) <= 19 else MAX_ID + 1

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("bigint", BigintConvertor())


def int_param(
    request: Request, name: str, default: int | None = None, *, low: int, high: int
) -> int | None:
    """The query parameter ``name`` as an integer in ``low..high``; absent or empty: default."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    text = text.strip()
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ApiError(400, "BadRequest", f"{name} must be an integer", parameter=name)
    if len(digits.lstrip("0")) > 20 or not low <= int(text) <= high:
        raise ApiError(
            400, "BadRequest", f"{name} must be between {low} and {high}", parameter=name
        )
    return int(text)


def path_id(request: Request, name: str = "id") -> int:
    """An id from the path; one past bigint names nothing (404, as an unknown id)."""
    value = request.path_params[name]
    if not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise ApiError(404, "NotFound", f"no such {name}: ids are at most {MAX_ID}", parameter=name)
    return value


def _nul_in(request: Request) -> str | None:
    """The name of the first value holding a NUL: "path", or a query parameter's."""
    if "\x00" in request.url.path:
        return "path"
    for key, value in request.query_params.multi_items():
        if "\x00" in key:
            return repr(key)
        if "\x00" in value:
            return key
    return None


class CheckedText:
    """Refuses a NUL in the path or the query string before any endpoint sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            where = _nul_in(request)
            if where is not None:
                what = "the path" if where == "path" else f"query parameter {where}"
                response = answer(
                    request,
                    400,
                    "BadRequest",
                    f"{what} contains a NUL character (%00)",
                    {"parameter": where},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
