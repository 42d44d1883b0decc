"""The dashboard's schedules page: every cron schedule a page at a time, the next to fire
first, with its next and last fire (and the run that made), paused or not; pause and resume
(fairlane.schedules: a resumed schedule fires from its next tick, the ticks missed meanwhile
are skipped)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fairlane import schedules
from fairlane.engine.statement import rows_async
from fairlane.errors import FairlaneError
from fairlane.web.auth import state_of
from fairlane.web.dashboard.environments import Paging, paging_of
from fairlane.web.dashboard.session import Session
from fairlane.web.dashboard.views import action, back, page, render

PER_PAGE = 50


async def _schedules(request: Request, session: Session) -> Response:
    paging = paging_of(request)
    paging = Paging(paging.search, paging.number, None)
    state = state_of(request)
    offset = (paging.number - 1) * PER_PAGE
    async with state.connection() as conn:
        found = await rows_async(
            conn, state.engine.web.schedules_page(paging.search, PER_PAGE, offset)
        )
    matching = found[0]["matching"] if found else 0
    return render(
        request,
        "schedules.html",
        session,
        schedules=found,
        search=paging.search or "",
        pager=paging.pager(PER_PAGE, matching),
    )


async def _schedule_action(request: Request, session: Session, form: dict[str, str]) -> Response:
    what = request.path_params["action"]
    environment, key = form.get("environment", ""), form.get("key", "")
    if what not in ("pause", "resume") or not environment or not key:
        return back(request, "/schedules", f"cannot {what} that schedule")
    state = state_of(request)
    change = schedules.pause_async if what == "pause" else schedules.resume_async
    async with state.connection() as conn:
        try:
            await change(conn, key, environment=environment, schema=state.schema)
        except FairlaneError as refused:
            return back(request, "/schedules", str(refused))
    return back(request, "/schedules", f"schedule {environment}/{key} {what}d")


schedules_page = page(_schedules)
schedule_action = action(_schedule_action)
