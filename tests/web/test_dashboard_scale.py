"""The dashboard at the size that broke it: 10,000 environments holding 100,000 queues, a
queued run in every environment and 200,000 ended runs of history. Every page stays under
200 KB, lists the busiest environment first, finds one by name, and reads through statements
whose plans touch runs only through indexes (never a scan of the runs table, never a query per
environment). Render times are printed, not asserted (docs/testing.md: no timed assertions). A
queue of 10,000 concurrency keys is tests/web/test_dashboard_keys.py's."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from fairlane.engine.sqlfiles import query, statement_params
from tests.web.conftest import Keys

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENVIRONMENTS = 10_000
QUEUES_EACH = 10
MAX_PAGE_BYTES = 200 * 1024
BUSY = "tenant-07777"
INDEXED = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}


def _build(db: psycopg.Connection[Any]) -> None:
    """Set-based: a handful of statements, whatever the size."""
    db.execute(
        "INSERT INTO fairlane.environments (name)"
        " SELECT 'tenant-' || lpad(i::text, 5, '0') FROM generate_series(1, %s) i",
        [ENVIRONMENTS],
    )
    db.execute(
        "INSERT INTO fairlane.queues (environment, name)"
        " SELECT e.name, 'queue-' || j FROM fairlane.environments e, generate_series(1, %s) j",
        [QUEUES_EACH],
    )
    # One queued run in every environment, 40 more (and 3 running) in the busy one.
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT name, 'queue-1', 'work', '{}', 'QUEUED' FROM fairlane.environments"
    )
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, started_at)"
        " SELECT %s, 'queue-3', 'work', '{}', CASE WHEN i <= 3 THEN 'EXECUTING' ELSE 'QUEUED' END,"
        "        CASE WHEN i <= 3 THEN now() END"
        " FROM generate_series(1, 43) i",
        [BUSY],
    )
    # History: ended runs, most long ago, some within the sparkline's ten minutes.
    db.execute(
        "INSERT INTO fairlane.runs"
        " (environment, queue, task, payload, status, created_at, started_at, finished_at)"
        " SELECT 'tenant-' || lpad((i %% %s + 1)::text, 5, '0'), 'queue-' || (i %% %s + 1), 'work',"
        "        '{}', CASE WHEN i %% 7 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,"
        "        t - interval '1 second', t - interval '1 second', t"
        " FROM generate_series(1, 200000) i,"
        "      LATERAL (SELECT now() - CASE WHEN i %% 100 = 0 THEN make_interval(secs => i %% 500)"
        "                                   ELSE interval '2 days' END AS t) ended",
        [ENVIRONMENTS, QUEUES_EACH],
    )
    db.execute("ANALYZE fairlane.runs")
    db.execute("ANALYZE fairlane.queues")
    db.execute("ANALYZE fairlane.environments")


@pytest.fixture
def built(db: psycopg.Connection[Any]) -> None:
    started = time.perf_counter()
    _build(db)
    _say(
        f"built {ENVIRONMENTS} environments, {ENVIRONMENTS * QUEUES_EACH} queues and "
        f"210,043 runs in {time.perf_counter() - started:.1f} s"
    )


def _say(line: str) -> None:
    print(f"\n[dashboard at scale] {line}", flush=True)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


async def _sign_in(http: httpx.AsyncClient, key: str) -> None:
    form = await http.get("/login")
    signed = await http.post("/login", data={"csrf": _csrf(form.text), "key": key, "next": "/"})
    assert signed.status_code == 303


def _environments_shown(html: str) -> list[str]:
    return re.findall(r'data-testid="env-([^"]+)"', html)


def _queues_shown(html: str) -> list[str]:
    return re.findall(r'<td class="indent"><a href="[^"]+">([^<]+)</a></td>', html)


PAGES = [
    "/",
    "/partials/overview",
    "/?page=250",
    "/?q=0777",
    "/queues",
    "/queues?page=1000",
    f"/queues?environment={BUSY}",
    f"/queues?environment={BUSY}&q=queue-1",
    f"/queue?environment={BUSY}&queue=queue-3",
    "/runs",
    "/workers",
    "/batches",
    "/schedules",
    "/runs/bulk/retry?status=FAILED",
]


async def test_every_page_stays_small_at_ten_thousand_environments(
    built: None, http: httpx.AsyncClient, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    await _sign_in(http, keys.admin)
    answers: dict[str, str] = {}
    for path in PAGES:
        await http.get(path)  # warm: the first render compiles its template
        started = time.perf_counter()
        answer = await http.get(path)
        took = (time.perf_counter() - started) * 1000
        assert answer.status_code == 200, (path, answer.text[:500])
        size = len(answer.content)
        with capsys.disabled():
            _say(f"GET {path}: {size / 1024:.1f} KB in {took:.0f} ms")
        assert size < MAX_PAGE_BYTES, (path, size)
        answers[path] = answer.text

    overview = _environments_shown(answers["/"])
    assert overview[0] == BUSY, overview[:3]
    assert len(overview) == 20
    assert "page 1 of 500" in answers["/"]
    assert "all 10 queues of tenant-07777" in answers["/"]
    assert _environments_shown(answers["/partials/overview"])[0] == BUSY
    # Search is by a part of the name: 0777 is in tenant-00777 and tenant-07770..07779.
    found = _environments_shown(answers["/?q=0777"])
    assert found[0] == BUSY
    assert sorted(found) == sorted(["tenant-00777", *(f"tenant-0777{i}" for i in range(10))])
    assert _environments_shown(answers["/?page=250"]) == [
        f"tenant-{i:05d}"
        for i in range(4980, 5000)  # the busy one came first
    ]
    assert _environments_shown(answers["/queues"])[0] == BUSY
    one = answers[f"/queues?environment={BUSY}"]
    assert len(_queues_shown(one)) == QUEUES_EACH
    # Its busiest queue first: queue-3 holds 43 runs, queue-1 one.
    assert one.index(">queue-3<") < one.index(">queue-1<") < one.index(">queue-10<")
    searched = answers[f"/queues?environment={BUSY}&q=queue-1"]
    assert _queues_shown(searched) == ["queue-1", "queue-10"]
    assert "No concurrency keys" in answers[f"/queue?environment={BUSY}&queue=queue-3"]


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def _numbered(sql: str) -> tuple[str, list[str]]:
    """The statement with ``$n`` placeholders, and the parameter names in their order."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%"), list(names)


def _explain(
    db: psycopg.Connection[Any], name: str, params: dict[str, Any], mode: str
) -> dict[str, Any]:
    """The executed plan of the statement as the server prepares it: ``mode`` is the
    plan_cache_mode (a generic plan is what a statement gets once psycopg prepares it)."""
    text, order = _numbered(query(name, "fairlane"))
    types = ", ".join(param.type for param in statement_params(name))
    with psycopg.ClientCursor(db) as cursor:
        cursor.execute(f"SET plan_cache_mode = {mode}")
        cursor.execute(f"PREPARE explained ({types}) AS {text}")
        try:
            arguments = ", ".join(["%s"] * len(order))
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained ({arguments})",
                [params[key] for key in order],
            )
            found = cursor.fetchone()
        finally:
            cursor.execute("DEALLOCATE explained")
            cursor.execute("RESET plan_cache_mode")
    assert found is not None
    plan = found[0]
    return dict((json.loads(plan) if isinstance(plan, str) else plan)[0])


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_the_pages_read_runs_through_indexes_only(
    built: None, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    names = [BUSY, *(f"tenant-{i:05d}" for i in range(1, 20))]
    # Each statement, its parameters, and how many times at most a node may read runs: once,
    # once per queue shown (a queue's head), or for the unserved tasks once per queue that
    # holds queued runs (an index skip from one such queue to the next).
    statements: list[tuple[str, dict[str, Any], int]] = [
        ("busy_environments", {"search": None, "name": None, "limit": 20, "offset": 0}, 1),
        ("busy_environments", {"search": "0777", "name": None, "limit": 20, "offset": 0}, 1),
        ("busy_environments", {"search": None, "name": BUSY, "limit": 20, "offset": 0}, 1),
        (
            "busy_queues",
            {"environments": names, "search": None, "per_environment": 5, "offset": 0},
            len(names) * 5,
        ),
        ("finished_per_minute", {"environments": names, "minutes": 10}, 1),
        ("unserved_tasks", {"head": 20, "max_rows": 100}, ENVIRONMENTS + 2),
        ("oldest_heads", {"environments": names}, len(names) + 2),
    ]
    for name, params, loops in statements:
        explained = _explain(db, name, params, mode)
        nodes = list(_plan_nodes(explained["Plan"]))
        on_runs = [node for node in nodes if node.get("Relation Name") == "runs"]
        assert on_runs, name
        # Through an index: an index (only) scan, or a bitmap heap scan fed by a bitmap index
        # scan; never a sequential scan of runs, nor of the 100,000 queues.
        assert all(node["Node Type"] in INDEXED for node in on_runs), (
            name,
            [(node["Node Type"], node.get("Index Name")) for node in on_runs],
        )
        assert not [
            n for n in nodes if n.get("Relation Name") == "queues" and "Seq" in n["Node Type"]
        ]
        assert all(node["Actual Loops"] <= loops for node in on_runs), (
            name,
            [(node["Node Type"], node["Actual Loops"]) for node in on_runs],
        )
        indexes = {str(node["Index Name"]) for node in nodes if "Index Name" in node}
        with capsys.disabled():
            took = explained["Execution Time"]
            read = ", ".join(sorted(indexes))
            _say(f"{name} ({mode}): {took:.1f} ms in the database, through {read}")


async def test_the_oldest_queued_run_counts_every_queue_not_only_those_shown(
    http: httpx.AsyncClient, keys: Keys, db: psycopg.Connection[Any]
) -> None:
    """The overview shows an environment's five busiest queues; its oldest queued run may sit
    in a quiet queue that is not among them, and still shows."""
    db.execute("INSERT INTO fairlane.environments (name) VALUES ('wide')")
    db.execute(
        "INSERT INTO fairlane.queues (environment, name)"
        " SELECT 'wide', 'q' || i FROM generate_series(1, 7) i"
    )
    db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status)"
        " SELECT 'wide', 'q' || (i % 6 + 1), 'work', '{}', 'QUEUED' FROM generate_series(1, 18) i"
    )
    found = db.execute(
        "INSERT INTO fairlane.runs (environment, queue, task, payload, status, queued_at)"
        " VALUES ('wide', 'q7', 'work', '{}', 'QUEUED', now() - interval '1 hour') RETURNING id"
    ).fetchone()
    assert found is not None
    await _sign_in(http, keys.admin)
    page = (await http.get("/")).text
    assert ">q7<" not in page
    assert f'<a href="/runs/{found[0]}">1h 0m</a>' in page
