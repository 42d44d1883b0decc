"""Dashboard sessions, attacked through a real server (uvicorn on a loopback port) over a
database a real worker ran runs of two environments in: a cookie copied before the sign-out,
the revocation or the idle time is refused when replayed; a cookie never shows what its key
could not; every response carries the security headers; a worker prunes the ended sessions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from fairlane import TaskRegistry
from fairlane.cli import main as cli_main
from fairlane.errors import ConfigurationError
from fairlane.web.keys import create_key
from fairlane.worker import RunContext
from tests.helpers import fast_worker, wait_until, worker_in_thread
from tests.helpers.browser import live_server
from tests.web.conftest import Keys, bearer

pytest.importorskip("uvicorn")

from fairlane.web import create_app

pytestmark = pytest.mark.anyio

IDLE_S = 600.0
SESSIONS = "SELECT count(*) FROM fairlane.dashboard_sessions"


@dataclass(frozen=True)
class Scene:
    url: str
    keys: Keys
    run_a: int  # ran by the worker in env-a
    run_b: int  # ran by the worker in env-b


def _tasks() -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task("ledger.close")
    async def close(ctx: RunContext, payload: Any) -> Any:
        return {"closed": payload["book"]}

    return tasks


async def _finished(http: httpx.AsyncClient, key: str, run_id: int) -> None:
    async def completed() -> bool:
        answer = await http.get(f"/api/v1/runs/{run_id}", headers=bearer(key))
        return bool(answer.json()["status"] == "COMPLETED")

    await wait_until(completed, what=f"run {run_id} to complete")


@pytest.fixture
async def scene(dsn: str, keys: Keys) -> AsyncIterator[Scene]:
    """The server (sessions idle after IDLE_S) and a worker, with one run of env-a and one of
    env-b triggered through the API with each environment's key and run to the end."""
    app = create_app(dsn, "fairlane", pool_size=4, session_idle=IDLE_S)
    async with worker_in_thread(fast_worker(_tasks(), dsn)):
        with live_server(app) as url:
            async with httpx.AsyncClient(base_url=url) as http:
                made = []
                for key, book in ((keys.a, "a-books"), (keys.b, "b-payroll")):
                    answer = await http.post(
                        "/api/v1/tasks/ledger.close/trigger",
                        headers=bearer(key),
                        json={"payload": {"book": book}},
                    )
                    made.append(answer.json()["id"])
                await _finished(http, keys.a, made[0])
                await _finished(http, keys.b, made[1])
            yield Scene(url, keys, made[0], made[1])


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _browser(scene: Scene, cookie: str | None = None) -> httpx.AsyncClient:
    """A client of the server: a fresh browser, or an attacker replaying ``cookie``."""
    cookies = {"fairlane_session": cookie} if cookie is not None else None
    return httpx.AsyncClient(base_url=scene.url, cookies=cookies)


async def _sign_in(http: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await http.get("/login")
    return await http.post("/login", data={"csrf": _csrf(form.text), "key": key, "next": "/runs"})


async def _session_cookie(scene: Scene, key: str) -> str:
    async with _browser(scene) as http:
        signed_in = await _sign_in(http, key)
    assert signed_in.status_code == 303, signed_in.text
    return signed_in.cookies["fairlane_session"]


def _refused(answer: httpx.Response) -> bool:
    return answer.status_code == 303 and answer.headers["location"].startswith("/login")


def _hash(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


def _idle_for(db: psycopg.Connection[Any], cookie: str, seconds: float) -> None:
    """Move the session's last activity ``seconds`` back, as if that long had passed."""
    db.execute(
        "UPDATE fairlane.dashboard_sessions SET last_seen_at = last_seen_at - make_interval("
        "secs => %s) WHERE secret_hash = %s",
        (seconds, _hash(cookie)),
    )


def _key_id(db: psycopg.Connection[Any], key: str) -> int:
    row = db.execute("SELECT id FROM fairlane.api_keys WHERE prefix = %s", (key[:10],)).fetchone()
    assert row is not None
    return int(row[0])


def _seen_ago(db: psycopg.Connection[Any], cookie: str) -> float:
    row = db.execute(
        "SELECT extract(epoch FROM now() - last_seen_at) FROM fairlane.dashboard_sessions "
        "WHERE secret_hash = %s",
        (_hash(cookie),),
    ).fetchone()
    assert row is not None
    return float(row[0])


async def test_a_cookie_replayed_after_sign_out_is_refused(
    scene: Scene, db: psycopg.Connection[Any]
) -> None:
    async with _browser(scene) as user:
        assert (await _sign_in(user, scene.keys.admin)).status_code == 303
        stolen = user.cookies["fairlane_session"]
        async with _browser(scene, stolen) as attacker:
            # The copy works while the session lives: it shows env-b's run.
            page = await attacker.get(f"/runs/{scene.run_b}")
            assert page.status_code == 200
            assert "b-payroll" in page.text
            token = _csrf(page.text)

            out = await user.post("/logout", data={"csrf": _csrf((await user.get("/")).text)})
            assert _refused(out)
            assert 'fairlane_session=""' in out.headers["set-cookie"]

            for path in (
                "/",
                "/runs",
                f"/runs/{scene.run_b}",
                f"/runs/{scene.run_b}/partial",
                "/partials/overview",
                "/batches",
                "/queues",
                "/maintenance",
            ):
                assert _refused(await attacker.get(path)), path
            # Nor does the old cookie with the old CSRF token act.
            forged = await attacker.post(
                "/queues/pause", data={"environment": "env-b", "queue": "", "csrf": token}
            )
            assert _refused(forged)
            assert _refused(await attacker.post("/logout", data={"csrf": token}))
    assert db.execute(SESSIONS).fetchone() == (0,)
    paused = db.execute("SELECT count(*) FROM fairlane.environments WHERE paused").fetchone()
    assert paused == (0,)


async def test_revoking_the_key_ends_its_sessions_at_once(
    scene: Scene, db: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other_record, other = create_key(db, None, admin=True, name="other admin")
    laptop, phone = [await _session_cookie(scene, scene.keys.admin) for _ in range(2)]
    kept = await _session_cookie(scene, other)
    for cookie in (laptop, phone, kept):
        async with _browser(scene, cookie) as http:
            assert (await http.get("/runs")).status_code == 200
    assert db.execute(SESSIONS).fetchone() == (3,)

    assert cli_main(["keys", "revoke", "--dsn", dsn, str(_key_id(db, scene.keys.admin))]) == 0
    capsys.readouterr()

    for cookie in (laptop, phone):
        async with _browser(scene, cookie) as attacker:
            assert _refused(await attacker.get("/runs"))
            assert _refused(await attacker.get("/partials/overview"))
    left = db.execute("SELECT key_id FROM fairlane.dashboard_sessions").fetchall()
    assert left == [(other_record.id,)]
    async with _browser(scene, kept) as http:
        assert (await http.get("/runs")).status_code == 200
    async with _browser(scene) as http:
        again = await _sign_in(http, scene.keys.admin)
        assert again.status_code == 401
        assert "fairlane_session" not in again.cookies


async def test_an_idle_session_ends_and_a_poll_is_not_activity(
    scene: Scene, db: psycopg.Connection[Any]
) -> None:
    cookie = await _session_cookie(scene, scene.keys.admin)
    async with _browser(scene, cookie) as http:
        # Used within its idle time, again and again: it lives on, each use resetting the clock.
        for _ in range(3):
            _idle_for(db, cookie, IDLE_S - 30)
            assert (await http.get("/runs")).status_code == 200
            assert _seen_ago(db, cookie) < 5
        # A live fragment the page polls by itself answers, but does not reset the clock.
        _idle_for(db, cookie, IDLE_S - 30)
        assert (await http.get("/partials/overview")).status_code == 200
        assert _seen_ago(db, cookie) >= IDLE_S - 30
        _idle_for(db, cookie, 31)
        for path in ("/runs", "/partials/overview", f"/runs/{scene.run_a}"):
            assert _refused(await http.get(path)), path

    # Its end comes whatever the activity: 12 hours after the sign-in.
    cookie = await _session_cookie(scene, scene.keys.admin)
    async with _browser(scene, cookie) as http:
        assert (await http.get("/runs")).status_code == 200
        db.execute(
            "UPDATE fairlane.dashboard_sessions SET expires_at = now() - interval '1 second' "
            "WHERE secret_hash = %s",
            (_hash(cookie),),
        )
        assert _refused(await http.get("/runs"))


async def test_a_cookie_never_shows_what_its_key_could_not(
    scene: Scene, db: psycopg.Connection[Any]
) -> None:
    # An environment key opens no session at all.
    async with _browser(scene) as http:
        refused = await _sign_in(http, scene.keys.a)
        assert refused.status_code == 401
        assert "fairlane_session" not in refused.cookies
    assert db.execute(SESSIONS).fetchone() == (0,)
    # Neither the key itself nor a session row naming it (as if forged) passes for a session.
    db.execute(
        "INSERT INTO fairlane.dashboard_sessions (secret_hash, key_id, expires_at, idle_s) "
        "VALUES (%s, %s, now() + interval '1 hour', 600)",
        (_hash("forged"), _key_id(db, scene.keys.a)),
    )
    for cookie in (scene.keys.a, "forged", _hash("forged")):
        async with _browser(scene, cookie) as attacker:
            for path in ("/runs", f"/runs/{scene.run_b}", "/partials/overview"):
                assert _refused(await attacker.get(path)), (cookie, path)

    # An admin's session cookie is no key for the API, and adds nothing to env-a's key.
    admin_cookie = await _session_cookie(scene, scene.keys.admin)
    async with _browser(scene, admin_cookie) as attacker:
        for path in ("/api/v1/runs", f"/api/v1/runs/{scene.run_b}", "/api/v1/limits"):
            assert (await attacker.get(path)).status_code == 401, path
        as_a = bearer(scene.keys.a)
        assert (await attacker.get(f"/api/v1/runs/{scene.run_b}", headers=as_a)).status_code == 404
        listed = (await attacker.get("/api/v1/runs", headers=as_a)).json()["data"]
        assert [run["id"] for run in listed] == [scene.run_a]
        asked = await attacker.get("/api/v1/runs", params={"environment": "env-b"}, headers=as_a)
        assert asked.status_code == 403
        # While the admin's session itself sees both environments.
        page = (await attacker.get("/runs")).text
        assert f"/runs/{scene.run_a}" in page
        assert f"/runs/{scene.run_b}" in page


SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}


def _inline_code(html: str) -> list[str]:
    """What a self-only Content-Security-Policy would block in a page: inline scripts, style
    attributes and elements, event handler attributes, javascript: URLs."""
    return (
        re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
        + re.findall(r"<style\b|\sstyle=", html)
        + re.findall(r"\son[a-z]+=", html)
        + re.findall(r"javascript:", html)
    )


async def test_every_response_carries_the_security_headers(scene: Scene) -> None:
    cookie = await _session_cookie(scene, scene.keys.admin)
    async with _browser(scene, cookie) as http, _browser(scene) as stranger:
        batch = await http.post(
            "/api/v1/batches", json={"run_count": 2}, headers=bearer(scene.keys.a)
        )
        answers = [
            await http.get(path)
            for path in (
                "/",
                "/partials/overview",
                "/runs",
                "/runs?environment=env-b",
                f"/runs/{scene.run_a}",
                f"/runs/{scene.run_b}/partial",
                "/runs/999999",
                "/batches",
                f"/batches/{batch.json()['id']}",
                "/queues",
                "/maintenance",
                "/static/style.css",
                "/static/app.js",
                "/no/such/page",
            )
        ]
        answers.append(await http.post("/queues/pause", data={"environment": "env-a"}))  # 403
        answers += [await stranger.get("/login"), await stranger.get("/runs")]
        answers += [batch, await stranger.get("/api/v1/runs")]
    assert sorted({answer.status_code for answer in answers}) == [200, 201, 303, 401, 403, 404]
    for answer in answers:
        where = (answer.request.method, answer.request.url.path, answer.status_code)
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (where, name)
        policy = answer.headers["content-security-policy"]
        for directive in (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ):
            assert directive in policy, (where, directive)
        if answer.headers.get("content-type", "").startswith("text/html"):
            assert _inline_code(answer.text) == [], where


async def test_a_worker_prunes_the_sessions_that_ended(
    scene: Scene, db: psycopg.Connection[Any]
) -> None:
    other = create_key(db, None, admin=True, name="revoked by hand")[1]
    live, idle, old, of_revoked = [
        await _session_cookie(scene, key)
        for key in (scene.keys.admin, scene.keys.admin, scene.keys.admin, other)
    ]
    _idle_for(db, idle, IDLE_S + 1)
    db.execute(
        "UPDATE fairlane.dashboard_sessions SET expires_at = now() WHERE secret_hash = %s",
        (_hash(old),),
    )
    # A revocation written by hand, not through revoke_key: the rows stay until pruned.
    db.execute("UPDATE fairlane.api_keys SET revoked_at = now() WHERE name = 'revoked by hand'")
    db.execute(
        "UPDATE fairlane.periodic_jobs SET next_due_at = now() "
        "WHERE name = 'prune_dashboard_sessions'"
    )
    await wait_until(
        lambda: db.execute(SESSIONS).fetchone() == (1,), what="the worker to prune 3 sessions"
    )
    remaining = db.execute("SELECT secret_hash FROM fairlane.dashboard_sessions").fetchall()
    assert remaining == [(_hash(live),)]
    result = db.execute(
        "SELECT last_result FROM fairlane.periodic_jobs WHERE name = 'prune_dashboard_sessions'"
    ).fetchone()
    assert result == ({"pruned": 3},)
    async with _browser(scene, live) as http:
        assert (await http.get("/runs")).status_code == 200
    for cookie in (idle, old, of_revoked):
        async with _browser(scene, cookie) as attacker:
            assert _refused(await attacker.get("/runs"))


@pytest.mark.parametrize("idle", [0, 0.5, -60, float("nan"), float("inf"), "30m"])
def test_an_idle_time_a_session_cannot_live_under_is_refused(dsn: str, idle: Any) -> None:
    with pytest.raises(ConfigurationError, match="session_idle"):
        create_app(dsn, "fairlane", session_idle=idle)
