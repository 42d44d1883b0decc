"""The dashboard's queue page: the queue's busiest concurrency keys, most running first, then
most queued, with their counts, as ``fairlane limits keys`` and the API list them (one
statement: limits.busiest_keys); none for a queue without keys; a bounded table however many
keys the queue holds. The queues page links each queue to its page."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import psycopg
import pytest

from fairlane import limits
from tests.helpers.keyed_runs import add_keys
from tests.web.conftest import Keys
from tests.web.test_dashboard_scale import INDEXED, _explain, _plan_nodes

pytestmark = pytest.mark.anyio

KEY_ROW = re.compile(
    r'<tr data-testid="key-([^"]+)">\s*<td><code>[^<]*</code></td>\s*<td>(.*?)</td>\s*'
    r'<td class="num">(\d+)</td>',
    re.S,
)


async def _sign_in(http: httpx.AsyncClient, key: str) -> None:
    form = await http.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf, "no CSRF field in the sign-in form"
    signed = await http.post("/login", data={"csrf": csrf.group(1), "key": key, "next": "/"})
    assert signed.status_code == 303


def shown_keys(html: str) -> list[tuple[str, int, int]]:
    """The key table's rows: (key, running, queued)."""
    rows = []
    for key, running, queued in KEY_ROW.findall(html):
        # The meter's cell: "<span ...>...</span> 2<span class="muted">/3</span>", or "2/∞".
        count = re.search(r"(\d+)<span class=\"muted\">/", running)
        assert count, running
        rows.append((key, int(count.group(1)), int(queued)))
    return rows


def page_of(environment: str, queue: str) -> str:
    return "/queue?" + str(httpx.QueryParams({"environment": environment, "queue": queue}))


async def test_the_queue_page_lists_its_busiest_keys(
    http: httpx.AsyncClient, keys: Keys, db: psycopg.Connection[Any]
) -> None:
    add_keys(
        db,
        "acme",
        "mail",
        [("quiet", 0, 1), ("big", 2, 3), ("backlog", 0, 9), ("small", 2, 0), ("one", 1, 5)],
    )
    # Keyless runs, and another queue's and another environment's keys, are not this queue's.
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT 'acme', 'mail', 'work', '{}', 'QUEUED' FROM generate_series(1, 50)"
    )
    add_keys(db, "acme", "sms", [("big", 9, 9)])
    add_keys(db, "globex", "mail", [("big", 9, 9)])
    limits.set_queue(db, "acme", "mail", concurrency_limit=2, total_limit=6)
    await _sign_in(http, keys.admin)

    answer = await http.get(page_of("acme", "mail"))
    assert answer.status_code == 200, answer.text[:300]
    expected = [("big", 2, 3), ("small", 2, 0), ("one", 1, 5), ("backlog", 0, 9), ("quiet", 0, 1)]
    assert shown_keys(answer.text) == expected
    assert limits.busiest_keys(db, "acme", "mail", most=10) == [
        {"concurrency_key": key, "running": running, "queued": queued}
        for key, running, queued in expected
    ]
    assert '<dd>2 <span class="muted">per concurrency key</span></dd>' in answer.text
    assert '<dd>6 <span class="muted">across its keys</span></dd>' in answer.text
    assert "<dt>rate</dt><dd>none</dd>" in answer.text
    limits.set_queue(db, "acme", "mail", rate_limit=30, rate_period_s=60, rate_burst=5)
    rated = (await http.get(page_of("acme", "mail"))).text
    assert "<dd>30 per 60 s, bursts of 5 <span" in rated
    top = await http.get(page_of("acme", "mail") + "&top=2")
    assert shown_keys(top.text) == expected[:2]
    more = '<a href="/queue?environment=acme&amp;queue=mail&amp;top=100">the 100 busiest keys'
    assert more in top.text
    assert more not in answer.text

    # The queues page links every queue it lists to its page.
    queues = (await http.get("/queues?environment=acme")).text
    assert '<a href="/queue?environment=acme&amp;queue=mail">mail</a>' in queues


async def test_a_queue_without_keys_says_so_and_an_unknown_queue_is_not_found(
    http: httpx.AsyncClient, keys: Keys, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT 'acme', 'plain', 'work', '{}', 'QUEUED' FROM generate_series(1, 3)"
    )
    limits.set_queue(db, "acme", "plain", concurrency_limit=4)
    anonymous = await http.get(page_of("acme", "plain"))
    assert anonymous.status_code == 303
    assert anonymous.headers["location"].startswith("/login?next=")
    await _sign_in(http, keys.admin)
    plain = await http.get(page_of("acme", "plain"))
    assert plain.status_code == 200
    assert shown_keys(plain.text) == []
    assert "No concurrency keys" in plain.text
    missing = await http.get(page_of("acme", "nothing"))
    assert missing.status_code == 404
    assert "queue &#39;nothing&#39; of environment &#39;acme&#39; does not exist" in missing.text
    assert (await http.get("/queue?environment=acme")).status_code == 400
    assert (await http.get(page_of("acme", "plain") + "&top=1000")).status_code == 400


@pytest.fixture
def ten_thousand_keys(db: psycopg.Connection[Any]) -> None:
    """Key kNNNNN has NNNNN % 7 queued runs, every hundredth one a running run besides; "hot"
    runs the most. Behind them, 100,000 ended runs of history and keyless queued runs."""
    add_keys(
        db,
        "acme",
        "users",
        [(f"k{n:05d}", int(n % 100 == 0), n % 7) for n in range(10_000)] + [("hot", 5, 1)],
    )
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, finished_at)"
        " SELECT 'acme', 'users', 'work', '{}', 'COMPLETED', now() - interval '1 day'"
        " FROM generate_series(1, 100000)"
    )
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT 'acme', 'users', 'work', '{}', 'QUEUED' FROM generate_series(1, 1000)"
    )
    db.execute("ANALYZE fairlane.runs")


@pytest.mark.slow
async def test_a_queue_of_ten_thousand_keys_shows_ten(
    ten_thousand_keys: None,
    http: httpx.AsyncClient,
    keys: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await _sign_in(http, keys.admin)
    path = page_of("acme", "users")
    await http.get(path)  # warm: the first render compiles its template
    started = time.perf_counter()
    answer = await http.get(path)
    took = (time.perf_counter() - started) * 1000
    rows = shown_keys(answer.text)
    assert len(rows) == 10
    # "hot" (5 running), then the keys with one running, the most queued first (n % 7 == 6).
    assert rows[0] == ("hot", 5, 1)
    running_once = sorted(
        ((f"k{n:05d}", 1, n % 7) for n in range(0, 10_000, 100)), key=lambda r: (-r[2], r[0])
    )
    assert rows[1:] == running_once[:9]
    with capsys.disabled():
        print(
            f"\n[queue page] 10,000 keys: {len(answer.content) / 1024:.1f} KB in {took:.0f} ms",
            flush=True,
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_the_busiest_keys_read_runs_through_indexes_once(
    ten_thousand_keys: None,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    """One pass over each partial index for the queue (no scan of runs, no query per key),
    as the page, the CLI and the API read it."""
    params = {"environment": "acme", "queue": "users", "most": 10}
    explained = _explain(db, "busiest_keys", params, mode)
    nodes = list(_plan_nodes(explained["Plan"]))
    on_runs = [node for node in nodes if node.get("Relation Name") == "runs"]
    assert len(on_runs) == 2
    assert all(node["Node Type"] in INDEXED and node["Actual Loops"] == 1 for node in on_runs), [
        (node["Node Type"], node.get("Index Name"), node["Actual Loops"]) for node in on_runs
    ]
    indexes = {str(node["Index Name"]) for node in nodes if "Index Name" in node}
    assert indexes == {"runs_held_idx", "runs_queued_key_idx"}
    with capsys.disabled():
        took = explained["Execution Time"]
        print(f"\n[busiest keys] ({mode}) 10,000 keys: {took:.1f} ms in the database", flush=True)
