"""The dashboard's schedules page: next and last fire, the run the last fire made, search,
and pause and resume by a form."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from fairlane import schedules
from tests.web.conftest import Keys
from tests.web.test_dashboard_runs import _csrf, _sign_in, _trigger

pytestmark = pytest.mark.anyio


def _row(html: str, environment: str, key: str) -> str:
    start = html.index(f'data-testid="schedule-{environment}-{key}"')
    return html[start:].split("</tr>")[0]


async def test_schedules_show_next_and_last_fire_and_pause_and_resume(
    http: httpx.AsyncClient, keys: Keys, as_a: httpx.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    # Daily at an hour one to two hours away, so that its next fire is always after the
    # every-minute schedule's (a fixed hour ties with it in the minute before that hour).
    hour = (datetime.now(UTC) + timedelta(hours=2)).hour
    nightly_cron = f"0 {hour} * * *"
    schedules.create(db, "report", nightly_cron, external_id="nightly-report", environment="env-a")
    schedules.create(db, "ping", "* * * * *", external_id="every-minute", environment="env-b")
    fired = await _trigger(as_a, "report")
    db.execute(
        "UPDATE fairlane.schedules SET last_tick = now() - interval '2 hours', last_run_id = %s"
        " WHERE key = 'nightly-report'",
        [fired],
    )
    await _sign_in(http, keys.admin)
    page = (await http.get("/schedules")).text
    # The next to fire first.
    assert page.index("every-minute") < page.index("nightly-report")
    nightly = _row(page, "env-a", "nightly-report")
    assert f"<code>{nightly_cron}</code>" in nightly
    assert re.search(r'data-testid="next-fire">in \d+', nightly), nightly
    assert "2h 0m ago" in nightly
    assert f'href="/runs/{fired}">run {fired}</a>' in nightly
    assert "s-queued" in nightly
    assert "never" in _row(page, "env-b", "every-minute")

    searched = (await http.get("/schedules", params={"q": "REPORT"})).text
    assert "nightly-report" in searched
    assert "every-minute" not in searched

    form = {"csrf": _csrf(page), "environment": "env-a", "key": "nightly-report"}
    paused = await http.post("/schedules/pause", data=form)
    assert paused.status_code == 303
    assert schedules.get(db, "nightly-report", environment="env-a").paused
    page = (await http.get("/schedules")).text
    assert 'data-testid="resume-env-a-nightly-report"' in page
    # Paused ones come after the active ones.
    assert page.index("every-minute") < page.index("nightly-report")
    assert (await http.post("/schedules/resume", data=form)).status_code == 303
    assert not schedules.get(db, "nightly-report", environment="env-a").paused

    stale = await http.post("/schedules/pause", data={**form, "csrf": "stale"})
    assert stale.status_code == 403
    assert not schedules.get(db, "nightly-report", environment="env-a").paused
    missing = await http.post("/schedules/pause", data={**form, "key": "nothing"})
    assert missing.status_code == 303
    assert "flash=" in missing.headers["location"]
