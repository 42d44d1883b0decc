"""The dashboard's page of one queue: its settings, and its busiest concurrency keys with their
running and queued runs (``limits.busiest_keys``, the statement ``fairlane limits keys`` and the
API's ``/queues/{queue}/keys`` read). The page shows at most ``MAX_KEYS`` keys, whatever the
number of keys the queue holds."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fairlane import limits
from fairlane.engine.statement import first_async
from fairlane.web.auth import state_of
from fairlane.web.dashboard.session import Session
from fairlane.web.dashboard.views import page, render
from fairlane.web.params import int_param

KEYS_SHOWN = 10
MAX_KEYS = 100


async def _queue(request: Request, session: Session) -> Response:
    environment = request.query_params.get("environment") or ""
    name = request.query_params.get("queue") or ""
    if not environment or not name:
        message = "A queue's page needs its environment and its name (?environment=&queue=)."
        return render(request, "error.html", session, status=400, message=message)
    top = int_param(request, "top", KEYS_SHOWN, low=1, high=MAX_KEYS) or KEYS_SHOWN
    state = state_of(request)
    async with state.connection() as conn:
        queue = await first_async(conn, state.engine.web.queue_settings(environment, name))
        if queue is None:
            message = f"queue {name!r} of environment {environment!r} does not exist"
            return render(request, "error.html", session, status=404, message=message)
        keys = await limits.busiest_keys_async(
            conn, environment, name, most=top, schema=state.schema
        )
    return render(
        request, "queue.html", session, queue=queue, keys=keys, top=top, max_keys=MAX_KEYS
    )


queue = page(_queue)
