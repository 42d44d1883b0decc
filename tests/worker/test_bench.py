"""``fairlane bench``: each scenario runs end to end on its own database and prints one JSON
line. Tiny sizes; the figures themselves are not checked (benchmarks are not timed tests)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fairlane.cli import main
from fairlane.cli.common import EXIT_USAGE
from fairlane.tools.bench.common import percentile
from fairlane.tools.bench.fairness import jain
from fairlane.tools.bench.rate import max_in_window
from tests.helpers.bench import assert_rate, bench, bench_databases


def test_enqueue(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    result = bench(capsys, "enqueue", "--dsn", dsn, "--runs", "250", "--batch", "100")
    assert result["scenario"] == "enqueue"
    assert result["runs"] == 250
    assert_rate(result, 250, "runs_per_s", "seconds")
    assert result["ok"] is True
    assert bench_databases(db) == before, "the benchmark database was not dropped"


@pytest.mark.parametrize(
    ("concurrency", "claim_batch", "fast_claims"), [(10, None, False), (20, 5, True)]
)
def test_drain(
    dsn: str,
    db: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    concurrency: int,
    claim_batch: int | None,
    fast_claims: bool,
) -> None:
    argv = ["drain", "--dsn", dsn, "--runs", "200", "--concurrency", str(concurrency)]
    if claim_batch:
        argv += ["--claim-batch", str(claim_batch)]
    if fast_claims:
        argv += ["--fast-claims"]
    before = bench_databases(db)
    result = bench(capsys, *argv)
    assert result["scenario"] == "drain"
    assert result["runs"] == 200
    assert result["concurrency"] == concurrency
    assert result["claim_batch"] == (claim_batch or concurrency)
    assert result["durable_claims"] is not fast_claims
    assert_rate(result, 200, "runs_per_s", "seconds")
    assert result["ok"] is True, "not every run was COMPLETED"
    assert result["worker_cpu_us_per_run"] > 0
    assert result["loop"] in ("asyncio", "uvloop")
    assert bench_databases(db) == before


def test_drain_statements(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """With pg_stat_statements preloaded, the claim and the completion are reported per run;
    without it, the command refuses with one line naming the setting."""
    preloaded = "pg_stat_statements" in str(
        db.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
    )
    argv = ["bench", "drain", "--dsn", dsn, "--runs", "200", "--statements"]
    if not preloaded:
        assert main(argv) == EXIT_USAGE
        assert "shared_preload_libraries" in capsys.readouterr().err
        return
    result = bench(capsys, *argv[1:])
    claims = [row for row in result["statements"] if "lease_token, task" in row["statement"]]
    completions = [row for row in result["statements"] if row["statement"].startswith("UPDATE")]
    assert [claim["rows"] for claim in claims] == [200], "the claim's rows are the runs"
    assert sum(row["rows"] for row in completions) == 200
    assert all(row["wal_bytes_per_run"] > 0 for row in claims + completions)
    assert result["server_us_per_run"] > 0


def test_drain_sizes(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs table's bytes at each moment; pruning every finished run leaves the heap
    empty, and VACUUM gives the empty pages back."""
    before = bench_databases(db)
    result = bench(capsys, "drain", "--dsn", dsn, "--runs", "300", "--sizes")
    table = result["runs_table"]
    assert list(table) == ["before", "drained", "vacuumed", "pruned"]
    assert table["before"]["table_bytes"] > 0
    assert table["before"]["index_bytes"] > 0
    assert table["drained"]["table_bytes"] >= table["before"]["table_bytes"]
    assert table["pruned"]["table_bytes"] < table["vacuumed"]["table_bytes"]
    assert bench_databases(db) == before


def test_latency(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    result = bench(capsys, "latency", "--dsn", dsn, "--runs", "20", "--gap-ms", "5")
    assert result["scenario"] == "latency"
    assert result["runs"] == 20
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert result["ok"] is True, "not every triggered run was COMPLETED"
    assert bench_databases(db) == before


def test_percentiles_interpolate_like_the_peer_harness() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([7.0], 95) == 7.0


def test_drain_tenants(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench_databases(db)
    argv = ["drain", "--dsn", dsn, "--runs", "200", "--tenants", "7", "--env-cap", "15"]
    result = bench(capsys, *argv)
    assert result["scenario"] == "drain"
    assert result["runs"] == 200
    assert result["tenants"] == 7
    assert result["env_cap"] == 15
    assert_rate(result, 200, "runs_per_s", "seconds")
    assert result["ok"] is True, "not every run was COMPLETED"
    assert bench_databases(db) == before


def test_drain_tenants_shows_the_caps_held(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """With caps of one, the probe's samples never saw an environment or queue run two."""
    before = bench_databases(db)
    argv = ["drain", "--dsn", dsn, "--runs", "30", "--concurrency", "10"]
    result = bench(capsys, *argv, "--tenants", "3", "--env-cap", "1")
    assert result["ok"] is True, "not every run was COMPLETED"
    assert result["running_samples"] >= 1
    assert result["max_running_per_environment"] <= 1
    assert result["max_running_per_queue"] <= 1
    assert result["caps_held"] is True
    assert bench_databases(db) == before


def test_fairness(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench_databases(db)
    argv = ["fairness", "--dsn", dsn, "--big", "300", "--small", "20", "--concurrency", "4"]
    result = bench(capsys, *argv)
    assert result["scenario"] == "fairness"
    assert result["runs"] == {"A": 300, "B": 20, "C": 20, "D": 20}
    for key in ("first_start_s", "drain_s", "window_runs_per_s"):
        assert set(result[key]) == {"A", "B", "C", "D"}, key
    assert result["jain_index"] is None or 0.25 <= result["jain_index"] <= 1.0
    assert 0 <= result["a_done_when_bcd_drained"] <= 300
    # The small environments are triggered in one call each: their first run starts before
    # the last one ends, and both are measured from that call.
    for env in ("B", "C", "D"):
        assert 0 <= result["first_start_s"][env] <= result["drain_s"][env], env
    assert result["runs_per_s"] > 0
    assert result["ok"] is True, "not every run was COMPLETED"
    assert bench_databases(db) == before


def test_rate(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    argv = ["rate", "--dsn", dsn, "--runs", "30", "--rate", "100", "--workers", "2"]
    result = bench(capsys, *argv)
    assert result["scenario"] == "rate"
    assert result["runs"] == 30
    assert result["workers"] == 2
    assert result["rate_limit_per_s"] == 100
    assert result["rate_burst"] == 100
    assert_rate(result, 30, "runs_per_s", "seconds")
    assert result["ok"] is True, "not every run was COMPLETED"
    assert bench_databases(db) == before


def test_jain_and_windows() -> None:
    assert jain([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([0.0, 0.0]) is None
    assert max_in_window([0.0, 0.5, 0.99, 1.0, 1.5, 1.6, 1.7]) == 5
    assert max_in_window([]) == 0


def test_bulk_retry(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = bench_databases(db)
    result = bench(capsys, "retry", "--dsn", dsn, "--runs", "1500")
    assert (result["scenario"], result["runs"], result["retried"]) == ("retry", 1500, 1500)
    assert_rate(result, 1500, "runs_per_s", "seconds")
    assert result["ok"] is True, "not every failed run was QUEUED again"
    assert bench_databases(db) == before


def test_transitions(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each state change reports what it wrote; a claim is not HOT (status is in the partial
    indexes' predicates), so every run gets a new entry in the primary key and the index of held
    runs; a heartbeat changes no indexed column, so it can be HOT."""
    before = bench_databases(db)
    result = bench(capsys, "transitions", "--dsn", dsn, "--runs", "50")
    by_name = {figures["transition"]: figures for figures in result["transitions"]}
    assert list(by_name) == ["trigger", "claim", "heartbeat", "complete", "fail_retry"]
    # A keyless run is in one queued index, the keyless runs'.
    assert by_name["trigger"]["index_entries_per_run"] == {
        "runs_pkey": 1.0,
        "runs_queued_keyless_idx": 1.0,
    }
    assert by_name["claim"]["index_entries_per_run"] == {"runs_held_idx": 1.0, "runs_pkey": 1.0}
    assert by_name["claim"]["hot_updates_per_run"] == 0.0
    # HOT wherever the run's page has room for the new version (the claim's versions filled
    # some of these few pages); a version moved to another page takes at most the two entries
    # (fewer when a page about to split drops dead ones).
    heartbeat = by_name["heartbeat"]
    assert heartbeat["hot_updates_per_run"] > 0
    assert set(heartbeat["index_entries_per_run"]) <= {"runs_held_idx", "runs_pkey"}
    for entries in heartbeat["index_entries_per_run"].values():
        assert entries <= 1.0 - heartbeat["hot_updates_per_run"] + 1e-9
    assert by_name["complete"]["hot_updates_per_run"] == 0.0
    assert by_name["complete"]["index_entries_per_run"]["runs_prunable_idx"] == 1.0
    assert all(figures["wal_bytes_per_run"] > 0 for figures in by_name.values())
    assert bench_databases(db) == before


def test_periodic(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every enabled job ran each repetition and each scrape statement was timed; the
    environments' live leases and delayed runs were left as they were."""
    before = bench_databases(db)
    result = bench(capsys, "periodic", "--dsn", dsn, "--tenants", "3", "--reps", "2")
    assert result["scenario"] == "periodic"
    # Environment 0 active (3 queued, 1 executing, 1 delayed), 1 and 2 drained; 2 done each.
    assert result["runs"] == {"COMPLETED": 6, "DELAYED": 1, "EXECUTING": 1, "QUEUED": 3}
    assert set(result["jobs"]) >= {"sweep_concurrency", "reclaim_expired_leases"}
    assert set(result["metrics"]) == {
        "queue_series",
        "periodic_job_series",
        "list_workers",
        "unserved_tasks",
        "scrape",
    }
    for figures in [*result["jobs"].values(), *result["metrics"].values()]:
        assert 0 < figures["median_ms"] <= figures["max_ms"]
    outcomes = result["last_outcomes"]
    assert outcomes["sweep_concurrency"]["repaired_runs"] == 0
    assert outcomes["reclaim_expired_leases"]["requeued"] == 0
    assert outcomes["promote_delayed_runs"]["promoted"] == 0
    assert result["ok"] is True
    assert bench_databases(db) == before


def test_keys(dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]) -> None:
    before = bench_databases(db)
    argv = ["keys", "--dsn", dsn, "--hot", "200", "--light-keys", "5", "--light", "3"]
    result = bench(capsys, *argv)
    assert result["scenario"] == "keys"
    assert len(result["light_done_s"]) == 5
    assert result["light_done_s"] == sorted(result["light_done_s"])
    assert result["ok"] is True
    assert bench_databases(db) == before


@pytest.mark.parametrize("keys", [0, 3])
def test_key_rate(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str], keys: int
) -> None:
    """The figure itself is not checked, but the limit is: no key ever started more in one
    period than its burst and one period's rate."""
    before = bench_databases(db)
    argv = ["key-rate", "--dsn", dsn, "--keys", str(keys), "--rate", "20", "--period", "0.5"]
    result = bench(capsys, *argv, "--seconds", "1", "--poll-interval", "0.05")
    assert result["scenario"] == "key-rate"
    assert result["setting_per_s"] == 40
    assert result["burst"] == 20
    assert 0 < result["rate_per_s_min"] <= result["rate_per_s_max"]
    assert result["max_in_period"] <= 40
    assert bench_databases(db) == before
