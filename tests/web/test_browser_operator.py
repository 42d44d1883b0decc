"""What an operator does in the dashboard, in headless chromium against a real server: the runs
list's error, duration and finished columns and its searches (run id, idempotency key, tag),
a bulk retry whose confirmation states the count, the overview's search and sparkline scale,
the schedules page's pause and resume, the workers page; and every page at a phone's width
(390 px): nothing wider than the screen, every navigation link in view. Each step is saved as
a screenshot (``tests/helpers/browser.py`` says where)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg
import pytest

from fairlane import schedules
from fairlane.triggering.api import trigger_many
from fairlane.triggering.request import TriggerRequest
from tests.helpers.browser import (
    chromium,
    console_errors,
    live_server,
    require_browser,
    screenshot,
    wait_for,
)
from tests.helpers.dashboard_data import Seeded, seed

pytest.importorskip("uvicorn")

from fairlane.web import create_app
from fairlane.web.keys import create_key

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

pytestmark = pytest.mark.slow
PHONE = (390, 844)


@pytest.fixture(autouse=True)
def _browser_present() -> None:
    require_browser()


@pytest.fixture
def seeded(dsn: str, db: psycopg.Connection[Any]) -> Seeded:
    found = seed(dsn)
    trigger_many(
        db,
        [
            TriggerRequest(
                "billing.charge_card",
                {"amount_cents": 500},
                environment="globex",
                queue="billing",
                idempotency_key="order-77",
            )
        ],
    )
    schedules.create(
        db, "reports.generate", "0 6 * * 1", external_id="weekly-report", environment="acme"
    )
    schedules.create(
        db, "emails.send_welcome", "*/15 * * * *", external_id="nudges", environment="acme"
    )
    return found


@pytest.fixture
def base_url(dsn: str, seeded: Seeded) -> Iterator[str]:
    with live_server(create_app(dsn, "fairlane", pool_size=4)) as url:
        yield url


@pytest.fixture
def driver(db: psycopg.Connection[Any], base_url: str) -> Iterator[Chrome]:
    key = create_key(db, None, admin=True, name="ops@example.com")[1]
    with chromium() as browser:
        browser.get(base_url + "/login")
        browser.find_element("css selector", "input[name=key]").send_keys(key)
        browser.find_element("css selector", "form button[type=submit]").click()
        wait_for(lambda: _path(browser) == "/", what="the overview after signing in")
        console_errors(browser)
        yield browser


def _path(browser: Chrome) -> str:
    return urlsplit(browser.current_url).path


def _text(browser: Chrome, selector: str) -> str:
    return str(
        browser.execute_script(
            "const found = document.querySelector(arguments[0]);"
            " return found ? found.innerText.trim() : '';",
            selector,
        )
    )


def _open(browser: Chrome, url: str, heading: str) -> None:
    browser.get(url)
    wait_for(lambda: heading in _text(browser, "main h1"), what=f"the page {heading!r}")


def _fill(browser: Chrome, selector: str, text: str) -> None:
    field = browser.find_element("css selector", selector)
    field.clear()
    field.send_keys(text)
    field.submit()


def test_runs_columns_searches_and_a_bulk_retry(
    driver: Chrome, base_url: str, seeded: Seeded, db: psycopg.Connection[Any]
) -> None:
    _open(driver, base_url + "/runs?environment=globex&status=FAILED", "Runs")
    failed = [
        row[0]
        for row in db.execute(
            "SELECT id FROM fairlane.runs WHERE environment = 'globex' AND status = 'FAILED'"
        ).fetchall()
    ]
    assert failed, "the seed has failed runs in globex"
    row = _text(driver, f'[data-testid="run-{failed[0]}"]')
    assert "CardDeclinedError" in row, row
    assert " ago" in row
    screenshot(driver, "operator-runs-failed")

    _fill(driver, "input[name=id]", str(seeded.completed))
    wait_for(lambda: _path(driver) == f"/runs/{seeded.completed}", what="the run's page")
    _open(driver, base_url + "/runs", "Runs")
    _fill(driver, "input[name=key]", "order-77")
    wait_for(lambda: "key=order-77" in driver.current_url, what="the key search")
    assert len(driver.find_elements("css selector", "tr[data-testid^=run-]")) == 1
    screenshot(driver, "operator-runs-by-key")
    _open(driver, base_url + "/runs", "Runs")
    _fill(driver, "input[name=tag]", "finance")
    wait_for(lambda: "tag=finance" in driver.current_url, what="the tag search")
    assert len(driver.find_elements("css selector", "tr[data-testid^=run-]")) == 1

    _open(driver, base_url + "/runs?environment=globex&status=FAILED", "Runs")
    driver.find_element("css selector", "[data-testid=bulk-retry]").click()
    wait_for(lambda: "Retry" in _text(driver, "main h1"), what="the confirmation")
    assert _text(driver, "[data-testid=bulk-count]") == str(len(failed))
    assert _text(driver, "main h1") == f"Retry {len(failed)} run{'s' if len(failed) > 1 else ''}?"
    screenshot(driver, "operator-bulk-confirm")
    driver.find_element("css selector", "[data-testid=bulk-apply]").click()
    wait_for(lambda: "retried" in _text(driver, ".flash"), what="the bulk action's report")
    assert _text(driver, ".flash").startswith(f"{len(failed)} of {len(failed)} matching runs")
    screenshot(driver, "operator-bulk-done")
    left = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE environment = 'globex' AND status = 'FAILED'"
    ).fetchone()
    assert left == (0,)
    assert console_errors(driver) == []


def test_overview_search_and_sparkline_scale(driver: Chrome, base_url: str) -> None:
    _open(driver, base_url + "/", "Overview")
    scale = _text(driver, ".spark-y")
    assert scale.split() == [scale.split()[0], "0"]
    assert int(scale.split()[0]) >= 1
    assert _text(driver, ".spark-x").split() == ["-10m", "now"]
    screenshot(driver, "operator-overview")
    _fill(driver, "form.search input[name=q]", "glob")
    wait_for(lambda: "q=glob" in driver.current_url, what="the search")
    cards = driver.find_elements("css selector", "section.env")
    assert [card.get_attribute("data-testid") for card in cards] == ["env-globex"]
    screenshot(driver, "operator-overview-search")


def test_schedules_pause_and_resume(
    driver: Chrome, base_url: str, db: psycopg.Connection[Any]
) -> None:
    _open(driver, base_url + "/schedules", "Schedules")
    assert "weekly-report" in _text(driver, "table.schedules")
    screenshot(driver, "operator-schedules")
    driver.find_element("css selector", "[data-testid=pause-acme-weekly-report]").click()
    wait_for(
        lambda: driver.find_elements("css selector", "[data-testid=resume-acme-weekly-report]"),
        what="the schedule paused",
    )
    assert schedules.get(db, "weekly-report", environment="acme").paused
    screenshot(driver, "operator-schedule-paused")
    driver.find_element("css selector", "[data-testid=resume-acme-weekly-report]").click()
    wait_for(
        lambda: driver.find_elements("css selector", "[data-testid=pause-acme-weekly-report]"),
        what="the schedule resumed",
    )
    assert not schedules.get(db, "weekly-report", environment="acme").paused


def test_every_page_fits_a_phone(driver: Chrome, base_url: str, seeded: Seeded) -> None:
    driver.set_window_size(*PHONE)
    pages = [
        ("/", "Overview", "overview"),
        ("/runs", "Runs", "runs"),
        (f"/runs/{seeded.failed}", f"Run {seeded.failed}", "run-failed"),
        ("/runs/bulk/retry?status=FAILED", "Retry", "bulk-confirm"),
        ("/batches", "Batches", "batches"),
        ("/queues", "Queues & limits", "queues"),
        ("/queue?environment=acme&queue=mail", "Queue mail", "queue"),
        ("/schedules", "Schedules", "schedules"),
        ("/workers", "Workers", "workers"),
        ("/maintenance", "Maintenance", "maintenance"),
    ]
    width = driver.execute_script("return window.innerWidth")
    assert width <= PHONE[0], width
    for path, heading, name in pages:
        _open(driver, base_url + path, heading)
        page_width = driver.execute_script("return document.documentElement.scrollWidth")
        wider = driver.execute_script(
            "return [...document.querySelectorAll('body *')]"
            ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)"
            ".slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert page_width <= width, (path, page_width, width, wider)
        outside = driver.execute_script(
            "return [...document.querySelectorAll('.top nav a, .who button')]"
            ".filter(a => { const r = a.getBoundingClientRect();"
            " return r.width === 0 || r.left < 0 || r.right > window.innerWidth; })"
            ".map(a => a.innerText)"
        )
        assert outside == [], (path, outside)
        screenshot(driver, f"phone-{name}")
    assert console_errors(driver) == []
