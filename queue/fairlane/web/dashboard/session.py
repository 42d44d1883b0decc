"""Dashboard sign-in: an admin API key, pasted once, opens a signed session cookie.

The cookie holds the key's id, an expiry and a random nonce, signed with HMAC-SHA256 under a
secret the app keeps in the database (never the key). Every page reads the key's row again,
so revoking the key closes its sessions at once. Every form carries a CSRF token derived from
the session's nonce (HMAC again) and is refused without it; the sign-in form, before any
session exists, uses a double-submit cookie. Cookies are HttpOnly and SameSite=Strict.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from fairlane.models import ApiKey
from fairlane.web.auth import sign, state_of
from fairlane.web.bodies import too_large
from fairlane.web.errors import ApiError
from fairlane.web.keys import live_key_async
from fairlane.web.urls import root

SESSION_COOKIE = "fairlane_session"
LOGIN_COOKIE = "fairlane_login"
SESSION_SECRET = "dashboard-sessions"
SESSION_SECONDS = 12 * 3600
MAX_FORM_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Session:
    key: ApiKey
    nonce: str
    csrf: str


def _cookie_path(request: Request) -> str:
    return root(request) or "/"


async def _secret(request: Request) -> bytes:
    return await state_of(request).secret(SESSION_SECRET)


async def session_of(request: Request) -> Session | None:
    """The request's live admin session, or None."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie or cookie.count(".") != 3:
        return None
    key_id, expires, nonce, signature = cookie.split(".")
    secret = await _secret(request)
    if not hmac.compare_digest(sign(secret, f"{key_id}.{expires}.{nonce}"), signature):
        return None
    if not (key_id.isdigit() and expires.isdigit()) or int(expires) < time.time():
        return None
    state = state_of(request)
    async with state.connection() as conn:
        key = await live_key_async(conn, int(key_id), schema=state.schema)
    if key is None or not key.is_admin:
        return None
    return Session(key, nonce, sign(secret, f"csrf:{nonce}"))


async def open_session(request: Request, response: Response, key: ApiKey) -> None:
    nonce = secrets.token_urlsafe(16)
    expires = int(time.time()) + SESSION_SECONDS
    signature = sign(await _secret(request), f"{key.id}.{expires}.{nonce}")
    response.set_cookie(
        SESSION_COOKIE, f"{key.id}.{expires}.{nonce}.{signature}", max_age=SESSION_SECONDS,
        path=_cookie_path(request), httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip
    response.delete_cookie(LOGIN_COOKIE, path=_cookie_path(request))


def close_session(request: Request, response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))


def login_token(request: Request) -> str:
    """The sign-in form's CSRF token: the login cookie's value (made when missing)."""
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)


def set_login_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        LOGIN_COOKIE, token, max_age=3600, path=_cookie_path(request), httponly=True,
        samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form, read with a bound (the first value of each field)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise too_large(MAX_FORM_BYTES)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise too_large(MAX_FORM_BYTES)
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        raise ApiError(400, "BadRequest", "the form is not UTF-8") from None
    return {name: values[0] for name, values in fields.items()}


def csrf_ok(expected: str, form: dict[str, str]) -> bool:
    return hmac.compare_digest(expected, form.get("csrf", ""))
