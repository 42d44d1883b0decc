"""Dashboard sign-in: an admin API key, pasted once, opens a session kept on the server.

The session cookie carries a random secret (256 bits); the database keeps only its SHA-256,
the admin key it was opened with, and its times (``sql/web/sessions.sql``). Every page looks
the row up with its key: signing out deletes the row, revoking the key deletes its rows, and
a session idle longer than its idle time (``create_app(session_idle=...)``, ``fairlane serve
--session-idle``) or older than ``SESSION_SECONDS`` is refused, so a copied cookie stops
working the moment any of these happens. The live fragments a page polls do not count as
activity: an open tab nobody touches still goes idle. Every form carries a CSRF token derived
from the session (HMAC under a secret the app keeps in the database) and is refused without
it; the sign-in form, before any session exists, uses a double-submit cookie. Cookies are
HttpOnly and SameSite=Strict.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from fairlane.engine.statement import first_async, rows_async
from fairlane.models import ApiKey
from fairlane.web.auth import sign, state_of
from fairlane.web.bodies import too_large
from fairlane.web.errors import ApiError
from fairlane.web.urls import root

SESSION_COOKIE = "fairlane_session"
LOGIN_COOKIE = "fairlane_login"
CSRF_SECRET = "dashboard-sessions"
SESSION_SECONDS = 12 * 3600
# last_seen_at is written at most this often (or a quarter of the idle time, if shorter), so
# a busy session is not a row update per request; the idle clock is that much coarse.
TOUCH_SECONDS = 60.0
MAX_COOKIE_CHARS = 128
MAX_FORM_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Session:
    key: ApiKey
    secret_hash: str
    csrf: str


def _cookie_path(request: Request) -> str:
    return root(request) or "/"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _presented(request: Request) -> str | None:
    cookie = request.cookies.get(SESSION_COOKIE)
    return cookie if cookie and len(cookie) <= MAX_COOKIE_CHARS else None


async def session_of(request: Request, *, touch: bool = True) -> Session | None:
    """The request's live admin session, or None. ``touch``: the request counts as activity
    (a page, a form), not as a poll."""
    cookie = _presented(request)
    if cookie is None:
        return None
    state = state_of(request)
    digest = _hash(cookie)
    idle = state.session_idle_s
    statement = state.engine.web.session_key(digest, idle, touch, min(TOUCH_SECONDS, idle / 4))
    async with state.connection() as conn:
        key = await first_async(conn, statement)
    if key is None:
        return None
    csrf = sign(await state.secret(CSRF_SECRET), f"csrf:{digest}")
    return Session(key, digest, csrf)


async def open_session(request: Request, response: Response, key: ApiKey) -> bool:
    """A new session for ``key`` (a live admin key), its cookie set on ``response``; a session
    the browser already had is ended first, so a sign-in never keeps a cookie it was handed.
    False when the key was revoked in between (nothing is set)."""
    state = state_of(request)
    secret = secrets.token_urlsafe(32)
    opened = state.engine.web.open_session(
        _hash(secret), key.id, SESSION_SECONDS, state.session_idle_s
    )
    async with state.connection() as conn:
        previous = _presented(request)
        if previous is not None:
            await rows_async(conn, state.engine.web.close_session(_hash(previous)))
        if await first_async(conn, opened) is None:
            return False
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=SESSION_SECONDS,
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(LOGIN_COOKIE, path=_cookie_path(request))
    return True


async def close_session(request: Request, response: Response, session: Session) -> None:
    """Sign-out: the session's row is deleted (its cookie is refused from now on, wherever a
    copy of it is), and the browser's cookie cleared."""
    state = state_of(request)
    async with state.connection() as conn:
        await rows_async(conn, state.engine.web.close_session(session.secret_hash))
    response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))


def login_token(request: Request) -> str:
    """The sign-in form's CSRF token: the login cookie's value (made when missing)."""
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)


def set_login_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=3600,
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


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
