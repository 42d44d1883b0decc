"""The dashboard's pages: runs, run detail, batches, the queues page's actions, maintenance
(the overview and the queues page are environments.py, the workers page workers.py).
Server-rendered (jinja2); the overview and a running run's page refresh their live part by
polling a fragment. Every page needs an admin
session (``session.py``); every form carries its CSRF token.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from fairlane import control, limits
from fairlane.batches.api import get_batch_async
from fairlane.engine.statement import drive_async, first_async, rows_async
from fairlane.errors import BatchNotFoundError, FairlaneError, RunNotFoundError
from fairlane.maintenance import list_jobs_async
from fairlane.models import FINAL_STATUSES
from fairlane.web.auth import state_of
from fairlane.web.dashboard.session import (
    LOGIN_COOKIE,
    Session,
    close_session,
    csrf_ok,
    login_token,
    open_session,
    read_form,
    session_of,
    set_login_cookie,
)
from fairlane.web.errors import ApiError
from fairlane.web.keys import authenticate_async
from fairlane.web.params import MAX_ID, int_param, path_id
from fairlane.web.realtime.inbox import Scope
from fairlane.web.realtime.stream import EventStream
from fairlane.web.urls import root

HERE = Path(__file__).parent
templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
PAGE = 50


def _age(value: datetime | float | None) -> str:
    """A short human duration: a datetime's age, or seconds."""
    if value is None:
        return "-"
    seconds = (datetime.now(UTC) - value).total_seconds() if isinstance(value, datetime) else value
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m {seconds % 60:.0f}s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h {seconds % 3600 // 60:.0f}m"
    return f"{seconds // 86400:.0f}d {seconds % 86400 // 3600:.0f}h"


def _duration(seconds: float | None) -> str:
    """A length of time, to the millisecond under a second ("250 ms", "1m 30s")."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f}s".replace(".0s", "s")
    return _age(seconds).removesuffix(" 0s").removesuffix(" 0m").removesuffix(" 0h")


def _until(value: datetime) -> str:
    """How long until ``value`` ("in 5s"), or "due" once it has passed."""
    seconds = (value - datetime.now(UTC)).total_seconds()
    return "due" if seconds <= 0 else f"in {_age(seconds)}"


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _percent(part: float, whole: float | None) -> int:
    """``part`` of ``whole`` as a whole percentage from 0 to 100 (a bar's ``pct-N`` class); a
    part above nothing shows as at least 1, so one failure in a large batch is still seen."""
    if not whole or whole <= 0 or part <= 0:
        return 0
    return max(1, min(100, round(part * 100 / whole)))


templates.filters.update(
    age=_age, when=_when, pretty=_pretty, duration=_duration, until=_until, pct=_percent
)


def render(
    request: Request, name: str, session: Session | None, *, status: int = 200, **context: Any
) -> HTMLResponse:
    context.setdefault("csrf", session.csrf if session else "")
    html = templates.get_template(name).render(
        root=root(request),
        session=session,
        path=request.url.path,
        flash=request.query_params.get("flash"),
        **context,
    )
    return HTMLResponse(html, status_code=status)


Page = Callable[[Request, Session], Awaitable[Response]]


def page(handler: Page, *, poll: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """A page behind the admin session: without one, to the sign-in form. ``poll``: a live
    fragment a page fetches by itself, which does not keep the session from going idle."""

    async def endpoint(request: Request) -> Response:
        session = await session_of(request, touch=not poll)
        if session is None:
            target = urlencode({"next": request.url.path})
            return RedirectResponse(f"{root(request)}/login?{target}", status_code=303)
        return await handler(request, session)

    endpoint.__name__ = handler.__name__
    return endpoint


def action(handler: Callable[[Request, Session, dict[str, str]], Awaitable[Response]]) -> Any:
    """A form's POST: an admin session and its CSRF token, or 403."""

    async def endpoint(request: Request, session: Session) -> Response:
        form = await read_form(request)
        if not csrf_ok(session.csrf, form):
            return render(
                request,
                "error.html",
                session,
                status=403,
                message="The form's CSRF token is missing or stale: reload the page and try again.",
            )
        return await handler(request, session, form)

    endpoint.__name__ = handler.__name__
    return page(endpoint)


def back(request: Request, fallback: str, message: str = "") -> RedirectResponse:
    target = request.headers.get("referer") or ""
    here = f"{request.url.scheme}://{request.url.netloc}{root(request)}/"
    if not target.startswith(here):
        target = root(request) + fallback
    if message:
        target = target.split("#")[0]
        target += ("&" if "?" in target else "?") + urlencode({"flash": message})
    return RedirectResponse(target, status_code=303)


# -- sign in ---------------------------------------------------------------------------------


def _safe_next(request: Request, given: str | None) -> str:
    base = root(request)
    if given and given.startswith(base + "/") and not given.startswith("//") and "\\" not in given:
        return given
    return base + "/"


def _login_page(request: Request, target: str, error: str | None) -> Response:
    token = login_token(request)
    response = render(
        request,
        "login.html",
        None,
        status=401 if error else 200,
        csrf=token,
        error=error,
        next=target,
    )
    set_login_cookie(request, response, token)
    return response


async def login(request: Request) -> Response:
    return _login_page(request, _safe_next(request, request.query_params.get("next")), None)


async def login_post(request: Request) -> Response:
    form = await read_form(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    target = _safe_next(request, form.get("next"))
    if not expected or not csrf_ok(expected, form):
        return _login_page(request, target, "The sign-in form expired: try again.")
    state = state_of(request)
    async with state.connection() as conn:
        key = await authenticate_async(conn, form.get("key", "").strip(), schema=state.schema)
    if key is None:
        return _login_page(request, target, "That key is not valid (unknown or revoked).")
    if not key.is_admin:
        return _login_page(
            request, target, "The dashboard needs an admin key (fairlane keys create --admin)."
        )
    response = RedirectResponse(target, status_code=303)
    if not await open_session(request, response, key):
        return _login_page(request, target, "That key is not valid (unknown or revoked).")
    return response


async def _logout(request: Request, session: Session, form: dict[str, str]) -> Response:
    response = RedirectResponse(f"{root(request)}/login", status_code=303)
    await close_session(request, response, session)
    return response


logout = action(_logout)


# -- runs ------------------------------------------------------------------------------------


async def _run_context(request: Request, run_id: int) -> dict[str, Any]:
    state = state_of(request)
    async with state.connection() as conn:
        run = await drive_async(conn, control.get_run(state.engine, run_id))
        children = await rows_async(conn, state.engine.web.run_children(run_id, 200))
        waits = await rows_async(conn, state.engine.web.run_waits(run_id, 200))
        steps = await drive_async(conn, control.steps(state.engine, run_id))
        link = await first_async(conn, state.engine.web.run_batch(run_id))
        batch = None
        if link and link["batch_id"] is not None:
            try:
                batch = await get_batch_async(conn, link["batch_id"], schema=state.schema)
            except BatchNotFoundError:
                batch = None
    return {
        "run": run,
        "children": children,
        "waits": waits,
        "steps": steps,
        "batch": batch,
        "batch_index": link["batch_index"] if link else None,
        "final": run.status in FINAL_STATUSES,
    }


def _run_id(request: Request) -> int:
    return path_id(request)


async def _run(request: Request, session: Session) -> Response:
    try:
        context = await _run_context(request, _run_id(request))
    except RunNotFoundError as missing:
        return render(request, "error.html", session, status=404, message=str(missing))
    return render(request, "run.html", session, **context)


async def _run_live(request: Request, session: Session) -> Response:
    return render(request, "_run.html", session, **await _run_context(request, _run_id(request)))


async def _run_events(request: Request, session: Session) -> Response:
    """The run page follows its run over an event stream (fairlane.web.realtime.stream) and
    fetches its fragment when told the run changed; an admin session sees every environment."""
    state = state_of(request)
    run_id = _run_id(request)
    async with state.connection() as conn:
        await drive_async(conn, control.get_run(state.engine, run_id))
    return EventStream(state, Scope("run", run_id, None), state.streams.hold(None))


run = page(_run)
run_live = page(_run_live, poll=True)
run_events = page(_run_events, poll=True)


async def _run_action(request: Request, session: Session, form: dict[str, str]) -> Response:
    state = state_of(request)
    run_id = _run_id(request)
    what = request.path_params["action"]
    async with state.connection() as conn:
        try:
            if what == "cancel":
                await drive_async(conn, control.cancel(state.engine, run_id))
            elif what == "retry":
                await drive_async(conn, control.retry(state.engine, run_id))
            else:
                return back(request, f"/runs/{run_id}", f"unknown action {what}")
        except FairlaneError as refused:
            return back(request, f"/runs/{run_id}", str(refused))
    return back(request, f"/runs/{run_id}", f"run {run_id}: {what} done")


run_action = action(_run_action)


# -- batches ---------------------------------------------------------------------------------


async def _batches(request: Request, session: Session) -> Response:
    state = state_of(request)
    before = int_param(request, "before_id", None, low=1, high=MAX_ID)
    environment = request.query_params.get("environment") or None
    async with state.connection() as conn:
        found = await rows_async(conn, state.engine.web.recent_batches(environment, before, PAGE))
    next_page = None
    if len(found) == PAGE:
        next_page = "?" + urlencode(
            {**({"environment": environment} if environment else {}), "before_id": found[-1].id}
        )
    return render(
        request,
        "batches.html",
        session,
        batches=found,
        next_page=next_page,
        environment=environment or "",
    )


async def _batch(request: Request, session: Session) -> Response:
    state = state_of(request)
    batch_id = path_id(request)
    async with state.connection() as conn:
        try:
            batch = await get_batch_async(conn, batch_id, schema=state.schema)
        except BatchNotFoundError as missing:
            return render(request, "error.html", session, status=404, message=str(missing))
        failed = await rows_async(
            conn, state.engine.web.batch_items_page(batch_id, None, "FAILED", 200)
        )
    return render(request, "batch.html", session, batch=batch, failed=failed)


batches = page(_batches)
batch = page(_batch)


# -- queues and limits -----------------------------------------------------------------------


def _limit(text: str | None) -> Any:
    if text is None:
        return limits.UNCHANGED
    text = text.strip().lower()
    if text in ("", "none", "unlimited", "-"):
        return None
    digits = text.removeprefix("-")
    # Anything else (ASCII digits only: "²" is a digit to isdigit, not to int) goes to the
    # library as it is, which refuses it with a SettingError the page shows.
    return int(text) if digits.isascii() and digits.isdigit() and len(digits) < 20 else text


async def _queue_action(request: Request, session: Session, form: dict[str, str]) -> Response:
    state = state_of(request)
    what = request.path_params["action"]
    environment, queue = form.get("environment", ""), form.get("queue", "")
    if not environment:
        return back(request, "/queues", "no environment given")
    if "\x00" in environment + queue:
        raise ApiError(400, "BadRequest", "the environment or queue contains a NUL character")
    target = f"queue {environment}/{queue}" if queue else f"environment {environment}"
    changes: dict[str, Any] = {}
    if what in ("pause", "resume"):
        changes["paused"] = what == "pause"
    elif what == "limits":
        changes["concurrency_limit"] = _limit(form.get("concurrency_limit"))
        changes["size_limit"] = _limit(form.get("size_limit"))
    else:
        return back(request, "/queues", f"unknown action {what}")
    async with state.connection() as conn:
        try:
            if queue:
                await limits.set_queue_async(
                    conn, environment, queue, schema=state.schema, **changes
                )
            else:
                await limits.set_environment_async(
                    conn, environment, schema=state.schema, **changes
                )
        except FairlaneError as refused:
            return back(request, "/queues", str(refused))
    done = {"pause": "paused", "resume": "resumed", "limits": "limits set"}[what]
    return back(request, "/queues", f"{target} {done}")


queue_action = action(_queue_action)


# -- maintenance -----------------------------------------------------------------------------


async def _maintenance(request: Request, session: Session) -> Response:
    state = state_of(request)
    async with state.connection() as conn:
        jobs = await list_jobs_async(conn, schema=state.schema)
    return render(request, "maintenance.html", session, jobs=jobs)


maintenance = page(_maintenance)
