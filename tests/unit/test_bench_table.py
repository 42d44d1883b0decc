"""The side-by-side table is a pure function of the JSON lines: medians, raw values, ratios,
cells for peers that are not installed or steps that failed, and rows left out when no side
has a line for them."""

from __future__ import annotations

from typing import Any

from fairlane.tools.bench.suite.table import summarize

INSTALLED = {"graphile": "installed", "pgqueuer": "installed"}


def fairlane(case: str, size: int, **fields: Any) -> dict[str, Any]:
    label = f"fairlane/{case}" + ("" if size == 20000 or case == "latency" else f"@{size}")
    return {"label": label, "side": "fairlane", "case": case, "size": size, "ok": True, **fields}


def drain(case: str, size: int, rate: int, **fields: Any) -> dict[str, Any]:
    setting = (
        {"concurrency": 10, "claim_batch": 10}
        if case == "drain/c10"
        else {
            "concurrency": 400,
            "claim_batch": 200,
        }
    )
    return fairlane(
        case, size, process_runs_per_s=rate, runs_per_s=rate - 1000, **setting, **fields
    )


def peer(name: str, config: str, size: int, rate: int, enqueue: int = 70000) -> dict[str, Any]:
    return {
        "label": f"{name}/throughput/{config}",
        "side": name,
        "case": f"throughput/{config}",
        "size": size,
        "config": config,
        "jobs": size,
        "process_jobs_per_s": rate,
        "enqueue_jobs_per_s": enqueue,
        "ok": True,
    }


def latency(side: str, p50: float, p99: float) -> dict[str, Any]:
    return {
        "label": f"{side}/latency",
        "side": side,
        "case": "latency",
        "size": 300,
        "p50_ms": p50,
        "p99_ms": p99,
    }


SITTING = [
    {"label": "suite", "peers": INSTALLED, "sizes": [20000, 100000, 1000000]},
    drain("drain/best", 20000, 23000),
    peer("graphile", "tuned", 20000, 48000, enqueue=75000),
    peer("pgqueuer", "batch100", 20000, 20000, enqueue=69873),
    drain("drain/c10", 20000, 8000),
    peer("graphile", "c10", 20000, 4000),
    peer("pgqueuer", "c10", 20000, 3000),
    drain("drain/tenants1", 20000, 12000),
    drain("drain/tenants10000", 20000, 11000),
    drain("drain/tenants10000/cap1", 20000, 10000, max_running_per_environment=1),
    drain("drain/tenants10000/cap1", 20000, 10400, max_running_per_environment=1),
    drain("drain/tenants1/c10", 20000, 5000),
    drain("drain/tenants10000/c10", 20000, 4500),
    drain("drain/keys10000", 20000, 19200),
    drain("drain/keys10000/c10", 20000, 6000),
    fairlane("enqueue", 20000, runs_per_s=60000),
    latency("fairlane", 3.0, 5.0),
    latency("graphile", 4.4, 10.8),
    {
        "label": "pgqueuer/latency",
        "side": "pgqueuer",
        "case": "latency",
        "size": 300,
        "error": "exit 1",
        "cmd": "python pgqueuer_bench.py latency",
    },
    drain("drain/best", 100000, 20000, enqueue_runs_per_s=91000),
    peer("graphile", "tuned", 100000, 21000),
    peer("pgqueuer", "batch100", 100000, 8000),
    drain(
        "drain/best",
        1000000,
        18000,
        enqueue_runs_per_s=105000,
        runs_table_bytes_before=250_000_000,
        runs_table_bytes_after=40_000_000,
        runs_index_bytes_before=120_000_000,
        runs_index_bytes_after=9_500_000,
        runs_table_bytes_pruned=25_000,
        runs_index_bytes_pruned=180_000_000,
    ),
    peer("graphile", "tuned", 1000000, 59000, enqueue=84000),
    # a second repetition of the 20k best drain: the cell shows the median and both runs
    drain("drain/best", 20000, 25000),
]


def rows(table: str) -> dict[str, list[str]]:
    """Each table row's cells by its workload."""
    found = {}
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| workload"):
            # the ratio sign written as an x, to compare with plain text
            cells = [cell.strip().replace("\u00d7", "x") for cell in line.strip("|").split("|")]
            found[cells[0]] = cells[1:]
    return found


def test_workload_rows_hold_medians_with_each_run_in_brackets() -> None:
    table = rows(summarize(SITTING))
    assert table["drain 20k, best setting (runs/s)"] == [
        "400/200: 24,000 [23,000 25,000]",
        "tuned: 48,000",
        "batch100: 20,000",
    ]
    assert table["drain 100k, best setting (runs/s)"] == [
        "400/200: 20,000",
        "tuned: 21,000",
        "batch100: 8,000",
    ]
    # PgQueuer has no 1M step: its cell says the step was not run.
    assert table["drain 1M, best setting (runs/s)"] == [
        "400/200: 18,000",
        "tuned: 59,000",
        "\u2013",
    ]
    assert table["drain 20k, concurrency 10 (runs/s)"] == [
        "10/10: 8,000",
        "c10: 4,000",
        "c10: 3,000",
    ]
    assert table["bulk enqueue 20k, 1,000 per call (runs/s)"] == [
        "60,000",
        "from tuned: 75,000",
        "from batch100: 69,873",
    ]
    # Above the enqueue step's size, every side's bulk enqueue is the one that filled its drain.
    assert table["bulk enqueue 100k before the best drain, 1,000 per call (runs/s)"] == [
        "from 400/200: 91,000",
        "from tuned: 70,000",
        "from batch100: 70,000",
    ]
    assert table["bulk enqueue 1M before the best drain, 1,000 per call (runs/s)"] == [
        "from 400/200: 105,000",
        "from tuned: 84,000",
        "\u2013",
    ]
    assert "bulk enqueue 20k before the best drain, 1,000 per call (runs/s)" not in table
    assert table["pickup p50 / p99 (ms)"] == ["3.00 / 5.00", "4.40 / 10.80", "failed (exit 1)"]


def test_ratio_rows_are_those_the_targets_are_stated_in() -> None:
    table = rows(summarize(SITTING))
    assert table["fairlane ÷ peer, drain 20k best"] == ["", "0.50x", "1.20x"]
    assert table["fairlane ÷ peer, drain 1M best"] == ["", "0.31x", ""]
    assert table["fairlane ÷ peer, drain 20k concurrency 10"] == ["", "2.00x", "2.67x"]
    assert table["fairlane ÷ peer, bulk enqueue 20k"] == ["", "0.80x", "0.86x"]
    assert table["fairlane ÷ peer, bulk enqueue 100k before the drain"] == ["", "1.30x", "1.30x"]
    assert table["fairlane ÷ peer, bulk enqueue 1M before the drain"] == ["", "1.25x", ""]
    assert table["fairlane ÷ peer, pickup p50 / p99"] == ["", "0.68x / 0.46x", ""]
    assert table["drain 100k ÷ drain 20k, best setting"] == ["0.83x", "0.44x", "0.40x"]
    assert table["drain 1M ÷ drain 100k, best setting"] == ["0.90x", "2.81x", ""]
    assert table["--tenants 10,000 ÷ --tenants 1, drain 20k best setting"] == [
        "11,000 ÷ 12,000 = 0.92x",
        "",
        "",
    ]
    assert table["--tenants 10,000 cap 1 ÷ --tenants 1, drain 20k best setting"] == [
        "10,200 ÷ 12,000 = 0.85x; most running per environment 1",
        "",
        "",
    ]
    assert table["--tenants 10,000 ÷ --tenants 1, drain 20k concurrency 10"] == [
        "4,500 ÷ 5,000 = 0.90x",
        "",
        "",
    ]
    # The keyed drains against the same drain without keys.
    assert table["--keys 10,000 ÷ keyless, drain 20k best setting"] == [
        "19,200 ÷ 24,000 = 0.80x",
        "",
        "",
    ]
    assert table["--keys 10,000 ÷ keyless, drain 20k concurrency 10"] == [
        "6,000 ÷ 8,000 = 0.75x",
        "",
        "",
    ]
    moments = "queued → drained and vacuumed (history kept) → pruned and vacuumed"
    assert table[f"runs table; indexes: {moments}, 1M"] == [
        "table 250.0 MB → 40.0 MB → 0.0 MB; index 120.0 MB → 9.5 MB → 180.0 MB",
        "",
        "",
    ]
    assert table["runs table; indexes: pruned and vacuumed ÷ queued, 1M"] == [
        "table 0.00x; index 1.50x",
        "",
        "",
    ]


def test_peers_not_installed_say_so_and_why() -> None:
    reason = "PEERS_DIR is not set"
    lines = [
        {"label": "suite", "peers": {"graphile": reason, "pgqueuer": reason}},
        drain("drain/best", 200, 3000),
        latency("fairlane", 5.0, 9.0),
    ]
    text = summarize(lines)
    table = rows(text)
    assert table["drain 200, best setting (runs/s)"] == [
        "400/200: 3,000",
        "not installed",
        "not installed",
    ]
    assert table["pickup p50 / p99 (ms)"] == ["5.00 / 9.00", "not installed", "not installed"]
    assert f"graphile-worker: not installed ({reason})" in text
    assert f"PgQueuer: not installed ({reason})" in text
    # Rows no side has a line for are left out, the ratio rows with nothing to divide too.
    assert not any(
        title.startswith(("drain 1M", "bulk", "runs table", "fairlane ÷")) for title in table
    )


def test_failed_and_not_ok_runs_are_noted_beside_the_median() -> None:
    lines = [
        drain("drain/best", 20000, 20000),
        drain("drain/best", 20000, 22000, ok=False),
        {
            "label": "fairlane/drain/best",
            "side": "fairlane",
            "case": "drain/best",
            "size": 20000,
            "error": "stopped after 600s",
        },
    ]
    table = rows(summarize(lines))
    assert table["drain 20k, best setting (runs/s)"][0] == (
        "400/200: 21,000 [20,000 22,000], 1 failed (not ok)"
    )


def test_the_peer_harness_own_lines_are_read_by_their_label() -> None:
    """A results file of the harness's run_all.sh has labels and job counts, no side or case."""
    lines: list[dict[str, Any]] = [
        {"label": "env", "workload": "env"},
        {
            "label": "graphile/throughput/tuned@100k",
            "config": "tuned",
            "jobs": 100000,
            "process_jobs_per_s": 21039,
            "enqueue_jobs_per_s": 77754,
            "ok": True,
        },
        {"label": "pgqueuer/latency", "p50_ms": 4.4, "p99_ms": 8.08, "count": 300},
    ]
    table = rows(summarize(lines))
    assert table["drain 100k, best setting (runs/s)"] == ["\u2013", "tuned: 21,039", "\u2013"]
    assert table["pickup p50 / p99 (ms)"] == ["\u2013", "\u2013", "4.40 / 8.08"]
