"""The overview and the queues page: environments busiest first, a page at a time, each with
its busiest queues (sql/web/busy.sql). What a page reads and renders is bounded by its page
size, not by how many environments and queues there are: with 10,000 environments and 100,000
queues a page stays a few tens of kilobytes (tests/web/test_dashboard_scale.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from fairlane import limits
from fairlane.engine.statement import rows_async
from fairlane.web.auth import state_of
from fairlane.web.dashboard.session import Session
from fairlane.web.dashboard.views import page, render
from fairlane.web.errors import ApiError
from fairlane.web.params import int_param

THROUGHPUT_MINUTES = 10
# Environments a page shows, and the busiest queues shown under each: the overview's, and the
# queues page's (each of its rows carries two forms).
ENVIRONMENTS_PER_PAGE = 20
QUEUES_PER_ENVIRONMENT = 5
LIMITS_PER_PAGE = 10
# One environment's queues, on the queues page for that environment.
QUEUES_PER_PAGE = 50
MAX_SEARCH = 200
MAX_PAGE = 1_000_000


@dataclass(frozen=True, slots=True)
class Paging:
    """Which page of what: ``search`` a part of a name, ``number`` from 1."""

    search: str | None
    number: int
    environment: str | None

    def link(self, number: int) -> str:
        given = {"environment": self.environment, "q": self.search, "page": number}
        return "?" + urlencode({key: value for key, value in given.items() if value})

    def pager(self, size: int, matching: int) -> dict[str, Any]:
        last = max(1, -(-matching // size))
        return {
            "number": self.number,
            "last": last,
            "matching": matching,
            "previous": self.link(self.number - 1) if self.number > 1 else None,
            "next": self.link(self.number + 1) if self.number < last else None,
        }


def paging_of(request: Request) -> Paging:
    search = (request.query_params.get("q") or "").strip() or None
    if search is not None and len(search) > MAX_SEARCH:
        raise ApiError(400, "BadRequest", f"q is at most {MAX_SEARCH} characters", parameter="q")
    number = int_param(request, "page", 1, low=1, high=MAX_PAGE) or 1
    environment = request.query_params.get("environment") or None
    return Paging(search, number, environment)


def _cap(env: dict[str, Any]) -> int | None:
    limit = env["env_limit"]
    return int(limit * env["burst_factor"]) if limit is not None else None


def _throughput(env: dict[str, Any], finished: list[dict[str, Any]]) -> None:
    """Runs ended per minute (the last bar is the minute under way), ended ok or not."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    env["throughput"] = [0] * THROUGHPUT_MINUTES
    env["done"] = env["failed"] = 0
    for row in finished:
        if row["environment"] != env["name"]:
            continue
        slot = THROUGHPUT_MINUTES - 1 - int((now - row["minute"]).total_seconds() // 60)
        if 0 <= slot < THROUGHPUT_MINUTES:
            env["throughput"][slot] += row["runs"]
        env["done" if row["status"] == "COMPLETED" else "failed"] += row["runs"]
    env["peak"] = max(env["throughput"])


async def _environments(
    request: Request,
    paging: Paging,
    *,
    per_environment: int,
    offset: int = 0,
    size: int = ENVIRONMENTS_PER_PAGE,
) -> tuple[list[dict[str, Any]], int]:
    """A page of ``size`` environments, each with its busiest queues; and how many match."""
    state = state_of(request)
    web = state.engine.web
    search = None if paging.environment else paging.search
    async with state.connection() as conn:
        found = await rows_async(
            conn,
            web.busy_environments(search, paging.environment, size, (paging.number - 1) * size),
        )
        names = [env["name"] for env in found]
        queue_search = paging.search if paging.environment else None
        queues = await rows_async(
            conn, web.busy_queues(names, queue_search, per_environment, offset)
        )
        finished = await rows_async(conn, web.finished_per_minute(THROUGHPUT_MINUTES, names))
        oldest = {
            head["environment"]: head for head in await rows_async(conn, web.oldest_heads(names))
        }
    environments = []
    for env in found:
        shown = [queue for queue in queues if queue["environment"] == env["name"]]
        env = {**env, "cap": _cap(env), "queues": shown}
        env["queue_count"] = shown[0]["matching"] if shown else 0
        env["oldest"] = oldest.get(env["name"])
        _throughput(env, finished)
        environments.append(env)
    return environments, found[0]["matching"] if found else 0


async def _overview_data(request: Request) -> dict[str, Any]:
    paging = paging_of(request)
    paging = Paging(paging.search, paging.number, None)
    environments, matching = await _environments(
        request, paging, per_environment=QUEUES_PER_ENVIRONMENT
    )
    query = paging.link(paging.number) if paging.search or paging.number > 1 else ""
    return {
        "environments": environments,
        "minutes": THROUGHPUT_MINUTES,
        "search": paging.search or "",
        "pager": paging.pager(ENVIRONMENTS_PER_PAGE, matching),
        "query": query,
    }


async def _overview(request: Request, session: Session) -> Response:
    return render(request, "overview.html", session, **await _overview_data(request))


async def _overview_live(request: Request, session: Session) -> Response:
    return render(request, "_overview.html", session, **await _overview_data(request))


async def _queues(request: Request, session: Session) -> Response:
    paging = paging_of(request)
    state = state_of(request)
    if paging.environment:
        # One environment: its queues a page at a time, searched by the queue's name.
        offset = (paging.number - 1) * QUEUES_PER_PAGE
        environments, _ = await _environments(
            request,
            Paging(paging.search, 1, paging.environment),
            per_environment=QUEUES_PER_PAGE,
            offset=offset,
        )
        matching = environments[0]["queue_count"] if environments else 0
        if environments and not environments[0]["queues"] and offset:
            matching = 0
        pager = paging.pager(QUEUES_PER_PAGE, matching)
    else:
        environments, matching = await _environments(
            request, paging, per_environment=QUEUES_PER_ENVIRONMENT, size=LIMITS_PER_PAGE
        )
        pager = paging.pager(LIMITS_PER_PAGE, matching)
    async with state.connection() as conn:
        scheduler = await limits.scheduler_settings_async(conn, schema=state.schema)
    return render(
        request,
        "queues.html",
        session,
        environments=environments,
        scheduler=scheduler,
        search=paging.search or "",
        environment=paging.environment or "",
        pager=pager,
    )


overview = page(_overview)
overview_live = page(_overview_live, poll=True)
queues = page(_queues)
