"""The dashboard: server-rendered pages over the same operations as the API, behind an admin
key's session (``session.py``), with its stylesheet and script in ``static/`` (no CDN: it works
offline)."""

from __future__ import annotations

from pathlib import Path

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from fairlane.web.dashboard import environments, queue, runs, schedules, views, workers


def routes() -> list[BaseRoute]:
    static = StaticFiles(directory=Path(__file__).parent / "static")
    return [
        Route("/", environments.overview, name="overview"),
        Route("/partials/overview", environments.overview_live, name="overview_live"),
        Route("/login", views.login, methods=["GET"], name="login"),
        Route("/login", views.login_post, methods=["POST"], name="login_post"),
        Route("/logout", views.logout, methods=["POST"], name="logout"),
        Route("/runs", runs.runs, name="runs"),
        Route("/runs/bulk/{action}", runs.bulk_confirm, methods=["GET"], name="bulk_confirm"),
        Route("/runs/bulk/{action}", runs.bulk_apply, methods=["POST"], name="bulk_apply"),
        Route("/runs/{id:bigint}", views.run, name="run"),
        Route("/runs/{id:bigint}/partial", views.run_live, name="run_live"),
        Route("/runs/{id:bigint}/events", views.run_events, name="run_events"),
        Route("/runs/{id:bigint}/{action}", views.run_action, methods=["POST"], name="run_action"),
        Route("/batches", views.batches, name="batches"),
        Route("/batches/{id:bigint}", views.batch, name="batch"),
        Route("/queues", environments.queues, name="queues"),
        Route("/queue", queue.queue, name="queue"),
        Route("/queues/{action}", views.queue_action, methods=["POST"], name="queue_action"),
        Route("/schedules", schedules.schedules_page, name="schedules"),
        Route(
            "/schedules/{action}",
            schedules.schedule_action,
            methods=["POST"],
            name="schedule_action",
        ),
        Route("/workers", workers.workers, name="workers"),
        Route("/maintenance", views.maintenance, name="maintenance"),
        Mount("/static", app=static, name="static"),
    ]
