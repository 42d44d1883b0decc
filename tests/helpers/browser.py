"""The dashboard in a real browser: the app under uvicorn on a free loopback port (in a thread
of the test process), driven through Debian's chromium and its chromedriver by selenium.

Nothing is downloaded at run time: the driver and the browser are the system's own, named by
path, so selenium's driver manager never runs. Without them the browser tests skip, except
under CI (``CI=true``), where they fail: .ci/run installs both.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WINDOW = (1440, 960)
# Where screenshots go: $FAIRLANE_ARTIFACTS/screenshots, else artifacts/screenshots in the
# repository (ignored by git).
REPOSITORY = Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0


def screenshot_dir() -> Path:
    base = Path(os.environ.get("FAIRLANE_ARTIFACTS") or REPOSITORY / "artifacts")
    folder = base / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def require_browser() -> None:
    """Skip (fail under CI) unless selenium, chromium and chromedriver are all here."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        missing.append("the selenium package (the dev extra)")
    if not missing:
        return
    reason = f"browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 at a free port; yields its base URL."""
    import uvicorn

    # Starlette serves static files through anyio.open_file, whose module anyio imports on
    # first use. Imported here rather than in the server's thread: pytest rewrites anyio's
    # modules (it is a pytest plugin), and on Python 3.11 two threads parsing at once can
    # fail with "AST constructor recursion depth mismatch".
    from anyio import open_file  # noqa: F401

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[listener])
        except BaseException as error:  # reported when the block ends
            failures.append(error)

    thread = threading.Thread(target=serve, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), what="uvicorn to start")
        assert server.started, f"uvicorn did not start: {failures}"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()
    assert not thread.is_alive(), "uvicorn did not stop"
    if failures:
        raise failures[0]


def wait_for(
    predicate: Callable[[], object], *, within: float = DEADLINE_S, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it is truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def chromium() -> Iterator[Chrome]:
    """A headless chromium session (a selenium ``Chrome``), closed at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-color-profile=srgb",
        "--lang=en-US",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(DEADLINE_S)
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Chrome, name: str) -> Path:
    """The whole page (beyond the window) as ``<name>.png`` in the screenshot folder."""
    size = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight,"
        " window.innerWidth]"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {
                "x": 0,
                "y": 0,
                # The window's width (a phone's, when the test narrowed it), or the page's
                # where it is wider.
                "width": max(size[0], size[2]),
                "height": size[1],
                "scale": 1,
            },
        },
    )
    path = screenshot_dir() / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def console_errors(driver: Chrome) -> list[str]:
    """The browser console's errors since the last call (a missing asset, a script error)."""
    # selenium leaves get_log untyped.
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [entry["message"] for entry in entries if entry["level"] == "SEVERE"]
