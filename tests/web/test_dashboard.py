"""The dashboard: sign-in with an admin key, every page, CSRF on every form, live fragments,
assets shipped in the package."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg
import pytest
from starlette.applications import Starlette

from tests.helpers import run_row
from tests.web.conftest import Keys

pytestmark = pytest.mark.anyio


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


async def _sign_in(http: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await http.get("/login")
    return await http.post("/login", data={"csrf": _csrf(form.text), "key": key, "next": "/runs"})


async def test_pages_need_an_admin_session(
    http: httpx.AsyncClient, keys: Keys, db: psycopg.Connection[Any]
) -> None:
    for path in (
        "/",
        "/runs",
        "/runs/1",
        "/batches",
        "/queues",
        "/maintenance",
        "/workers",
        "/schedules",
        "/runs/bulk/retry?tag=x",
        "/partials/overview",
    ):
        answer = await http.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/login?next=")
    refused = await _sign_in(http, keys.a)
    assert refused.status_code == 401
    assert "needs an admin key" in refused.text
    bad = await _sign_in(http, "fl_nothing")
    assert bad.status_code == 401
    assert "not valid" in bad.text
    no_csrf = await http.post("/login", data={"key": keys.admin})
    assert no_csrf.status_code == 401
    assert "expired" in no_csrf.text
    assert "fairlane_session" not in http.cookies

    signed_in = await _sign_in(http, keys.admin)
    assert signed_in.status_code == 303
    assert signed_in.headers["location"] == "/runs"
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie.replace("Strict", "strict")
    assert keys.admin not in cookie
    assert (await http.get("/runs")).status_code == 200

    db.execute("UPDATE fairlane.api_keys SET revoked_at = now() WHERE kind = 'admin'")
    assert (await http.get("/runs")).status_code == 303


async def test_every_page_renders(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    parent = (
        await as_a.post(
            "/api/v1/tasks/parent/trigger",
            json={"payload": {"n": 1}, "options": {"tags": ["vip"], "queue": "mail"}},
        )
    ).json()["id"]
    child = (
        await as_a.post("/api/v1/tasks/child/trigger", json={"options": {"parent_run_id": parent}})
    ).json()["id"]
    db.execute(
        """UPDATE fairlane.runs SET status = 'FAILED', finished_at = now(), attempts = 3,
           error = '{"type": "ValueError", "message": "boom", "traceback": "Traceback: x"}'
           WHERE id = %s""",
        (child,),
    )
    batch = (await as_a.post("/api/v1/batches", json={"run_count": 2})).json()
    # What a handler's ctx.step and a wait record (docs/durable-execution.md).
    db.execute(
        """INSERT INTO fairlane.run_steps (run_id, position, kind, name, attempt, status, result,
                                           finished_at)
           VALUES (%s, 0, 'STEP', 'charge_card', 1, 'COMPLETED', '{"charged": 42}', now()),
                  (%s, 1, 'WAIT', 'wait_for_token', 1, 'WAITING', NULL, NULL)""",
        (parent, parent),
    )
    await _sign_in(http, keys.admin)
    overview = await http.get("/")
    assert overview.status_code == 200
    assert "env-a" in overview.text
    assert "mail" in overview.text
    live = await http.get("/partials/overview")
    assert live.status_code == 200
    assert "<html" not in live.text
    assert "env-a" in live.text
    listed = await http.get("/runs", params={"environment": "env-a", "tag": "vip"})
    assert f"/runs/{parent}" in listed.text
    assert f'/runs/{child}"' not in listed.text
    detail = await http.get(f"/runs/{parent}")
    assert detail.status_code == 200
    assert f"/runs/{child}" in detail.text
    assert "&#34;n&#34;: 1" in detail.text
    assert "Steps and waits" in detail.text
    assert "charge_card" in detail.text
    assert "wait_for_token" in detail.text
    failed = await http.get(f"/runs/{child}")
    assert "boom" in failed.text
    assert "Traceback: x" in failed.text
    assert "Retry" in failed.text
    assert "data-final" in (await http.get(f"/runs/{child}/partial")).text
    assert (await http.get("/runs/999999")).status_code == 404
    assert f"/batches/{batch['id']}" in (await http.get("/batches")).text
    batch_page = (await http.get(f"/batches/{batch['id']}")).text
    assert "Every item received became a run." in batch_page
    assert f"/runs?batch={batch['id']}" in batch_page
    assert "promote_delayed_runs" in (await http.get("/maintenance")).text
    assert "no worker is registered" in (await http.get("/workers")).text
    assert "pause-env-a-mail" in (await http.get("/queues")).text
    css = await http.get("/static/style.css")
    assert css.status_code == 200
    assert "text/css" in css.headers["content-type"]
    assert (await http.get("/static/app.js")).status_code == 200
    assert "http" not in re.sub(r'href="[^"]*"|src="[^"]*"', "", overview.text.split("<main>")[0])


async def test_forms_pause_resume_and_set_limits_with_csrf(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    run_id = (
        await as_a.post("/api/v1/tasks/t/trigger", json={"options": {"queue": "mail"}})
    ).json()["id"]
    await _sign_in(http, keys.admin)
    page = await http.get("/queues")
    token = _csrf(page.text)
    target = {"environment": "env-a", "queue": "mail"}

    forged = await http.post("/queues/pause", data=target)
    assert forged.status_code == 403
    stale = await http.post("/queues/pause", data={**target, "csrf": "0" * 64})
    assert stale.status_code == 403
    paused = "SELECT paused FROM fairlane.queues WHERE environment = 'env-a' AND name = 'mail'"
    assert db.execute(paused).fetchone() == (False,)

    done = await http.post("/queues/pause", data={**target, "csrf": token})
    assert done.status_code == 303
    assert "paused" in done.headers["location"]
    assert db.execute(paused).fetchone() == (True,)
    assert "resume-env-a-mail" in (await http.get("/queues")).text
    await http.post("/queues/resume", data={**target, "csrf": token})
    assert db.execute(paused).fetchone() == (False,)

    await http.post(
        "/queues/limits", data={**target, "csrf": token, "concurrency_limit": "3", "size_limit": ""}
    )
    await http.post("/queues/pause", data={"environment": "env-a", "queue": "", "csrf": token})
    assert db.execute(
        "SELECT concurrency_limit, size_limit FROM fairlane.queues WHERE name = 'mail'"
    ).fetchone() == (3, None)
    assert db.execute(
        "SELECT paused FROM fairlane.environments WHERE name = 'env-a'"
    ).fetchone() == (True,)
    refused = await http.post(
        "/queues/limits", data={**target, "csrf": token, "concurrency_limit": "-2"}
    )
    assert "flash=" in refused.headers["location"]

    assert (await http.post(f"/runs/{run_id}/cancel", data={})).status_code == 403
    await http.post(f"/runs/{run_id}/cancel", data={"csrf": token})
    assert run_row(db, run_id)["status"] == "CANCELED"

    assert (await http.post("/logout", data={})).status_code == 403
    out = await http.post("/logout", data={"csrf": token})
    assert out.status_code == 303
    assert (await http.get("/queues")).status_code == 303


async def test_dashboard_mounted_and_api_only(dsn: str, app: Starlette, keys: Keys) -> None:
    from starlette.routing import Mount

    from fairlane.web import create_app

    host = Starlette(routes=[Mount("/ops", app=app)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=host), base_url="http://testserver"
    ) as http:
        assert (await http.get("/ops/")).headers["location"] == "/ops/login?next=%2Fops%2F"
        form = await http.get("/ops/login")
        assert 'href="/ops/static/style.css"' in form.text
        signed = await http.post(
            "/ops/login", data={"csrf": _csrf(form.text), "key": keys.admin, "next": "/ops/queues"}
        )
        assert signed.headers["location"] == "/ops/queues"
        assert (await http.get("/ops/queues")).status_code == 200
    api_only = create_app(dsn, "fairlane", dashboard=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api_only), base_url="http://testserver"
        ) as http:
            assert (await http.get("/")).status_code == 404
            assert (await http.get("/api/v1/openapi.json")).status_code == 200
    finally:
        await api_only.state.fairlane.close()


async def test_a_run_page_shows_each_attempts_waits(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Attempt 1 waited and failed; attempt 2 waits on a timer of its own: both are listed,
    and the run waits on one waitpoint, its current attempt's."""
    run = (await as_a.post("/api/v1/tasks/parent/trigger", json={})).json()["id"]
    db.execute(
        "UPDATE fairlane.runs SET status = 'WAITING', attempts = 2, wait_attempt = 2 WHERE id = %s",
        (run,),
    )
    for attempt, status in ((1, "COMPLETED"), (2, "PENDING")):
        db.execute(
            """WITH timer AS (
                   INSERT INTO fairlane.waitpoints (kind, status, complete_after)
                   VALUES ('DATETIME', %s, now() + interval '1 hour') RETURNING id)
               INSERT INTO fairlane.run_waitpoints (run_id, attempt, position, item, waitpoint_id)
               SELECT %s, %s, 0, 0, id FROM timer""",
            (status, run, attempt),
        )
    await _sign_in(http, keys.admin)
    page = (await http.get(f"/runs/{run}")).text
    assert "<b>waiting</b> on 1 waitpoint<" in page
    rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="num">0</td>', page)
    assert rows == ["2", "1"]
