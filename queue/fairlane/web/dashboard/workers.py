"""The dashboard's workers page: the workers registry, and the tasks with queued runs that no
live worker serves (fairlane.workers)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fairlane import workers as registry
from fairlane.web.auth import state_of
from fairlane.web.dashboard.session import Session
from fairlane.web.dashboard.views import page, render


async def _workers(request: Request, session: Session) -> Response:
    state = state_of(request)
    async with state.connection() as conn:
        registered = await registry.list_workers_async(conn, schema=state.schema)
        unserved = await registry.unserved_tasks_async(conn, schema=state.schema)
    return render(request, "workers.html", session, workers=registered, unserved=unserved)


workers = page(_workers)
