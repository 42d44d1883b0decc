"""The workers registry: every registered worker, and the tasks with queued runs that no live
worker serves. Admin keys only: the registry is the deployment's, across environments (an
environment key answers 403, as for the scheduler). ``limit`` bounds the unserved tasks
listed (longest waiting first)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fairlane import workers
from fairlane.web.auth import authenticate, state_of
from fairlane.web.params import int_param
from fairlane.web.serialize import unserved_json, worker_json

MAX_UNSERVED = 1000


async def list_workers(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    caller.require_admin()
    limit = (
        int_param(request, "limit", workers.DEFAULT_UNSERVED_LIMIT, low=1, high=MAX_UNSERVED)
        or workers.DEFAULT_UNSERVED_LIMIT
    )
    state = state_of(request)
    async with state.connection() as conn:
        registered = await workers.list_workers_async(conn, schema=state.schema)
        unserved = await workers.unserved_tasks_async(conn, limit=limit, schema=state.schema)
    return JSONResponse(
        {
            "workers": [worker_json(worker) for worker in registered],
            "unserved_tasks": [unserved_json(task) for task in unserved],
        }
    )


routes = [Route("/workers", list_workers, methods=["GET"], name="workers")]
