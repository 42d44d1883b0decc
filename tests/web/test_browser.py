"""The dashboard in headless chromium against a real server and database: every page opens
and is styled under the Content-Security-Policy, a queue pauses by a click, a run is followed
from the list to its page, the live parts change without a reload, and a page left open goes
to the sign-in form once its session ends. Every page is saved as a PNG screenshot
(``tests/helpers/browser.py`` says where)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg
import pytest

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
from tests.helpers.dashboard_data import Seeded, complete, seed

pytest.importorskip("uvicorn")

from fairlane.web import create_app
from fairlane.web.keys import create_key, revoke_key

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _browser_present() -> None:
    require_browser()


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed(dsn)


@pytest.fixture
def base_url(dsn: str, seeded: Seeded) -> Iterator[str]:
    with live_server(create_app(dsn, "fairlane", pool_size=4)) as url:
        yield url


@pytest.fixture
def driver(db: psycopg.Connection[Any], base_url: str) -> Iterator[Chrome]:
    """A chromium session signed in to the dashboard with an admin key."""
    key = create_key(db, None, admin=True, name="ops@example.com")[1]
    with chromium() as browser:
        browser.get(base_url + "/")
        wait_for(lambda: _path(browser) == "/login", what="the redirect to the sign-in form")
        screenshot(browser, "login")
        browser.find_element("css selector", "input[name=key]").send_keys(key)
        browser.find_element("css selector", "form button[type=submit]").click()
        wait_for(lambda: _path(browser) == "/", what="the overview after signing in")
        yield browser


def _path(browser: Chrome) -> str:
    return urlsplit(browser.current_url).path


def _text(browser: Chrome, selector: str) -> str:
    """An element's text, read in one script call (a live fragment may replace it between two
    Chrome commands); empty when it is not there."""
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


def _styled(browser: Chrome) -> None:
    """The package's stylesheet is applied: the page background and the card boxes."""
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), background
    assert browser.execute_script(
        "return getComputedStyle(document.querySelector('.card')).borderRadius"
    ) not in ("", "0px")


def test_every_page_opens_styled(driver: Chrome, base_url: str, seeded: Seeded) -> None:
    pages = [
        ("/", "Overview", "overview"),
        ("/runs", "Runs", "runs"),
        ("/runs?environment=globex&status=FAILED", "Runs", "runs-filtered"),
        (f"/runs/{seeded.completed}", f"Run {seeded.completed}", "run-completed"),
        (f"/runs/{seeded.failed}", f"Run {seeded.failed}", "run-failed"),
        (f"/runs/{seeded.parent}", f"Run {seeded.parent}", "run-parent"),
        (f"/runs/{seeded.executing.id}", f"Run {seeded.executing.id}", "run-executing"),
        ("/batches", "Batches", "batches"),
        (f"/batches/{seeded.batch_done}", f"Batch {seeded.batch_done}", "batch-done"),
        (f"/batches/{seeded.batch_open}", f"Batch {seeded.batch_open}", "batch-open"),
        ("/queues", "Queues & limits", "queues"),
        ("/queue?environment=acme&queue=mail", "Queue mail", "queue"),
        ("/maintenance", "Maintenance", "maintenance"),
        ("/workers", "Workers", "workers"),
        ("/runs/999999999", "Nothing here", "not-found"),
    ]
    console_errors(driver)  # the sign-in's
    for path, heading, name in pages:
        _open(driver, base_url + path, heading)
        _styled(driver)
        screenshot(driver, name)
        errors = [e for e in console_errors(driver) if "404" not in e or name != "not-found"]
        assert errors == [], f"{path}: {errors}"

    _open(driver, base_url + "/", "Overview")
    for environment in ("acme", "globex", "initech"):
        assert environment in _text(driver, "#live")
    # Bar lengths are classes of the stylesheet (the CSP allows no style attribute): applied.
    heights = driver.execute_script(
        "return [...document.querySelectorAll('.spark span')]"
        ".map(bar => parseFloat(getComputedStyle(bar).height));"
    )
    assert max(heights) > 20, heights
    _open(driver, f"{base_url}/runs/{seeded.failed}", "Run")
    assert "CardDeclinedError" in _text(driver, ".error-card")
    assert _text(driver, ".heading .status") == "FAILED"
    _open(driver, f"{base_url}/batches/{seeded.batch_done}", "Batch")
    assert "PAYLOAD_TOO_LARGE" in _text(driver, "main")


def test_pause_a_queue_by_clicking(
    driver: Chrome, base_url: str, db: psycopg.Connection[Any]
) -> None:
    paused = "SELECT paused FROM fairlane.queues WHERE environment = 'acme' AND name = 'mail'"
    assert db.execute(paused).fetchone() == (False,)
    _open(driver, base_url + "/queues", "Queues & limits")
    driver.find_element("css selector", '[data-testid="pause-acme-mail"]').click()
    wait_for(
        lambda: driver.find_elements("css selector", '[data-testid="resume-acme-mail"]'),
        what="the queue's Resume button",
    )
    assert "queue acme/mail paused" in _text(driver, ".flash")
    assert db.execute(paused).fetchone() == (True,)
    screenshot(driver, "queues-paused")

    _open(driver, base_url + "/", "Overview")
    row = driver.find_element("xpath", "//section[.//h2[contains(., 'acme')]]//tr[.//a[.='mail']]")
    assert "paused" in row.text


def test_open_a_queue_and_see_its_busiest_keys(driver: Chrome, base_url: str) -> None:
    _open(driver, base_url + "/queues?environment=acme", "Queues & limits")
    driver.find_element("css selector", 'a[href="/queue?environment=acme&queue=mail"]').click()
    wait_for(lambda: "Queue mail" in _text(driver, "main h1"), what="the queue's page")
    rows = driver.find_elements("css selector", '[data-testid^="key-"]')
    # 23 queued runs: user-1 has 12, user-2 six, five more users one each.
    assert [row.text.split() for row in rows[:2]] == [
        ["user-1", "0/∞", "12"],
        ["user-2", "0/∞", "6"],
    ]
    assert len(rows) == 7
    screenshot(driver, "queue-keys")


def _mark_page(browser: Chrome) -> None:
    """A mark on this page's window: gone if the page reloads."""
    browser.execute_script("window.__fairlaneMark = 'kept'")


def _still_marked(browser: Chrome) -> bool:
    return bool(browser.execute_script("return window.__fairlaneMark === 'kept'"))


def test_follow_a_run_and_watch_it_finish(
    driver: Chrome, base_url: str, dsn: str, seeded: Seeded
) -> None:
    run = seeded.executing
    _open(driver, f"{base_url}/runs?environment=acme&queue=reports&status=EXECUTING", "Runs")
    driver.find_element("css selector", f'table.runs a[href="/runs/{run.id}"]').click()
    wait_for(lambda: _path(driver) == f"/runs/{run.id}", what="the run's page")
    wait_for(lambda: f"Run {run.id}" in _text(driver, "main h1"), what="the run's heading")
    assert _text(driver, ".heading .status") == "EXECUTING"
    _mark_page(driver)

    complete(dsn, run, {"url": "s3://reports/quarterly.xlsx", "rows": 48211})
    wait_for(
        lambda: _text(driver, ".heading .status") == "COMPLETED",
        what="the run's status to change on its page",
    )
    assert _still_marked(driver), "the page reloaded instead of updating in place"
    assert "quarterly.xlsx" in _text(driver, "main")
    screenshot(driver, "run-completed-live")


def test_overview_updates_in_place(
    driver: Chrome, base_url: str, db: psycopg.Connection[Any]
) -> None:
    def queued_in_billing() -> str:
        # One script call: the fragment may be replaced between two Chrome commands.
        return str(
            driver.execute_script(
                "const cell = document.evaluate(arguments[0], document, null,"
                " XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;"
                " return cell ? cell.textContent.trim() : '';",
                "//section[.//h2[contains(., 'globex')]]//tr[.//a[.='billing']]/td[3]",
            )
        )

    wait_for(lambda: queued_in_billing() == "8", what="globex/billing's 8 queued runs")
    _mark_page(driver)
    trigger_many(
        db,
        [
            TriggerRequest(
                "billing.charge_card",
                {"amount_cents": 100 + n, "card": "4242"},
                environment="globex",
                queue="billing",
            )
            for n in range(5)
        ],
    )
    wait_for(lambda: queued_in_billing() == "13", what="the overview to count 13 queued")
    assert _still_marked(driver), "the page reloaded instead of updating in place"
    screenshot(driver, "overview-live")


def test_an_open_page_goes_to_sign_in_once_its_session_ends(
    driver: Chrome, base_url: str, db: psycopg.Connection[Any]
) -> None:
    _open(driver, base_url + "/queues", "Queues & limits")
    driver.find_element("css selector", "header form.who button[type=submit]").click()
    wait_for(lambda: _path(driver) == "/login", what="the sign-in form after signing out")
    driver.get(base_url + "/queues")
    wait_for(lambda: _path(driver) == "/login", what="the signed-out session to be refused")

    # Signed in again, the overview left open: its key is revoked, and the next poll of its
    # live part takes the page to the sign-in form (which brings it back here afterwards).
    key = create_key(db, None, admin=True, name="wall screen")
    driver.find_element("css selector", "input[name=key]").send_keys(key[1])
    driver.find_element("css selector", "form button[type=submit]").click()
    wait_for(lambda: _path(driver) == "/queues", what="the page asked for before signing in")
    _open(driver, base_url + "/", "Overview")
    revoke_key(db, key[0].id)
    wait_for(lambda: _path(driver) == "/login", what="the open overview to go to sign-in")
    assert "next=%2F" in driver.current_url
    screenshot(driver, "session-ended")


REGISTER = (
    "INSERT INTO fairlane.workers (id, host, pid, version, tasks, environments, concurrency,"
    " stale_after_s, last_seen_at) VALUES (%s, 'box-1', 4242, '1.2.3', %s, %s, 8, 30,"
    " now() - %s::interval)"
)


def test_the_workers_page_names_the_tasks_no_worker_serves(
    driver: Chrome, base_url: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(REGISTER, ("web-1", ["send_welcome"], ["acme"], "2 seconds"))
    db.execute(REGISTER, ("gone-1", ["nightly_report"], None, "1 hour"))
    trigger_many(db, [TriggerRequest("nightly_report", environment="initech")])
    db.commit()
    _open(driver, base_url + "/workers", "Workers")
    _styled(driver)
    screenshot(driver, "workers")
    live = _text(driver, "[data-testid='worker-web-1']")
    assert "live" in live
    assert "send_welcome" in live
    assert "acme" in live
    assert "stale" in _text(driver, "[data-testid='worker-gone-1']")
    assert "nightly_report" in _text(driver, "[data-testid='unserved-initech-nightly_report']")
    # A worker that serves it registers: the task is served, the next load says so.
    db.execute(REGISTER, ("night-1", ["nightly_report"], ["initech"], "0 seconds"))
    db.commit()
    _open(driver, base_url + "/workers", "Workers")
    assert _text(driver, "[data-testid='unserved-initech-nightly_report']") == ""
    assert "live" in _text(driver, "[data-testid='worker-night-1']")
