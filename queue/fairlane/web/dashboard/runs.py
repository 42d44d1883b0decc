"""The runs list, its filters and search (a run id, an idempotency key, a tag), and bulk retry
and cancel over a filter: the confirmation page states how many runs the filter matches,
counted in the database, and the action then takes exactly the runs that match it and existed
at confirmation (those with an id up to the newest one counted); fairlane.control's bulk
operations, a page of runs per statement."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fairlane import control
from fairlane.control import RunFilter
from fairlane.engine.statement import drive_async
from fairlane.errors import FairlaneError
from fairlane.models import FINAL_STATUSES, RunStatus
from fairlane.web.auth import state_of
from fairlane.web.dashboard.session import Session
from fairlane.web.dashboard.views import action, back, page, render
from fairlane.web.errors import ApiError
from fairlane.web.params import MAX_ID, int_param
from fairlane.web.urls import root

PAGE = 50
# The query parameters that filter runs (the list's, the bulk actions').
FILTERS = ("environment", "queue", "task", "status", "tag", "key", "batch")
VERBS = {"retry": "retried", "cancel": "canceled"}
# The statuses each action changes (sql: failed_statuses(), and every status not final).
CHANGES = {
    "retry": sorted(FINAL_STATUSES - {RunStatus.COMPLETED, RunStatus.CANCELED}),
    "cancel": sorted(set(RunStatus) - FINAL_STATUSES),
}
MAX_TEXT = 500


def _text(source: Any, name: str) -> str | None:
    value = (source.get(name) or "").strip()
    if len(value) > MAX_TEXT:
        raise ApiError(
            400, "BadRequest", f"{name} is at most {MAX_TEXT} characters", parameter=name
        )
    if "\x00" in value:
        raise ApiError(400, "BadRequest", f"{name} contains a NUL character", parameter=name)
    return value or None


def _batch(source: Any) -> int | None:
    text = _text(source, "batch")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and 0 < int(text) <= MAX_ID):
        raise ApiError(400, "BadRequest", "batch must be a batch id", parameter="batch")
    return int(text)


def run_filter(source: Any, *, limit: int = PAGE, before_id: int | None = None) -> RunFilter:
    """The filter the runs page's fields (query parameters, or a form's) describe."""
    status = _text(source, "status")
    if status is not None and status not in {s.value for s in RunStatus}:
        raise ApiError(400, "BadRequest", f"unknown status {status!r}", parameter="status")
    tag = _text(source, "tag")
    return RunFilter(
        environment=_text(source, "environment"),
        queue=_text(source, "queue"),
        task=_text(source, "task"),
        status=status,
        tags=[tag] if tag else (),
        idempotency_key=_text(source, "key"),
        batch_id=_batch(source),
        limit=limit,
        before_id=before_id,
    )


def _kept(source: Any) -> dict[str, str]:
    return {name: str(source[name]).strip() for name in FILTERS if source.get(name)}


async def _runs(request: Request, session: Session) -> Response:
    params = request.query_params
    wanted = (params.get("id") or "").strip().removeprefix("#")
    if wanted:
        # A run id goes straight to its page (which says so when there is no such run).
        if not (wanted.isascii() and wanted.isdigit() and len(wanted) <= 19):
            raise ApiError(400, "BadRequest", "id must be a run id", parameter="id")
        return RedirectResponse(f"{root(request)}/runs/{int(wanted)}", status_code=303)
    before = int_param(request, "before_id", None, low=1, high=MAX_ID)
    filters = run_filter(params, before_id=before)
    state = state_of(request)
    async with state.connection() as conn:
        try:
            runs = await drive_async(conn, control.list_runs(state.engine, filters))
        except FairlaneError as refused:
            raise ApiError(400, "BadRequest", str(refused)) from refused
    kept = _kept(params)
    next_page = "?" + urlencode({**kept, "before_id": runs[-1].id}) if len(runs) == PAGE else None
    return render(
        request,
        "runs.html",
        session,
        runs=runs,
        filters=kept,
        next_page=next_page,
        statuses=[s.value for s in RunStatus],
        first_page=bool(before),
        reset="?" + urlencode(kept) if kept else "",
        query=urlencode(kept),
        final=FINAL_STATUSES,
    )


def _verb(request: Request) -> str:
    what = str(request.path_params["action"])
    if what not in VERBS:
        raise ApiError(404, "NotFound", f"no bulk action {what!r}: retry or cancel")
    return what


async def _bulk_confirm(request: Request, session: Session) -> Response:
    """How many runs the filter matches now, and a form that acts on exactly those."""
    what = _verb(request)
    filters = run_filter(request.query_params, limit=1)
    kept = _kept(request.query_params)
    if filters.is_empty:
        return back(request, "/runs", "a bulk action needs a filter: choose the runs first")
    given = {filters.status} if isinstance(filters.status, str) else None
    changing = [s.value for s in CHANGES[what] if given is None or s.value in given]
    state = state_of(request)
    async with state.connection() as conn:
        newest = await drive_async(conn, control.list_runs(state.engine, filters))
        ceiling = newest[0].id + 1 if newest else None
        below = replace(filters, before_id=ceiling)
        count = await drive_async(conn, control.count_matching(state.engine, below))
        changed = 0
        if changing and ceiling is not None:
            able = replace(below, status=changing)
            changed = await drive_async(conn, control.count_matching(state.engine, able))
    return render(
        request,
        "bulk.html",
        session,
        what=what,
        verb=VERBS[what],
        count=count,
        changing=changed,
        statuses=[s.value for s in CHANGES[what]],
        ceiling=ceiling,
        filters=kept,
        query=urlencode(kept),
    )


async def _bulk_apply(request: Request, session: Session, form: dict[str, str]) -> Response:
    what = _verb(request)
    ceiling = form.get("ceiling", "")
    if not (ceiling.isascii() and ceiling.isdigit() and len(ceiling) <= 19):
        return back(request, "/runs", "the confirmation is missing: confirm the action again")
    filters = run_filter(form, before_id=int(ceiling))
    if filters.is_empty or filters.before_id is None:
        return back(request, "/runs", "a bulk action needs a filter")
    confirmed = int(form.get("count", "0") or 0) if form.get("count", "").isdigit() else None
    state = state_of(request)
    act = control.retry_many if what == "retry" else control.cancel_many
    async with state.connection() as conn:
        result = await drive_async(conn, act(state.engine, filters))
    left = ", ".join(f"{count} {why}" for why, count in sorted(result.unchanged.items()))
    message = f"{result.changed} of {result.matched} matching runs {VERBS[what]}"
    if left:
        message += f"; left alone: {left}"
    if confirmed is not None and confirmed != result.matched:
        message += f" ({confirmed} matched at confirmation)"
    target = f"{root(request)}/runs?" + urlencode({**_kept(form), "flash": message})
    return RedirectResponse(target, status_code=303)


runs = page(_runs)
bulk_confirm = page(_bulk_confirm)
bulk_apply = action(_bulk_apply)
