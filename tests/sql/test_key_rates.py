"""Rate limits per concurrency key (sql/claim/key_rates.sql): a queue's rate bounds each key's
starts, keyless runs share one bucket, runs over the rate wait and are never dropped, every
start takes a token (retries too), two claims never spend one token twice, and the pruning of
full buckets loses no charge. Time is moved by moving a bucket's full_at back, never by
sleeping."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.cli import main
from fairlane.engine.sqlfiles import query
from fairlane.errors import SettingError
from tests.helpers import claim_params
from tests.helpers.interleave import sessions
from tests.sql.test_concurrency_keys import key_of

CLAIM = query("claim_runs", "fairlane")
HOUR = 3600.0


def keyed(db: psycopg.Connection[Any], key: str | None, count: int) -> list[int]:
    requests = [
        TriggerRequest("t", i, environment="acme", concurrency_key=key) for i in range(count)
    ]
    return trigger_many(db, requests)


def claim(db: psycopg.Connection[Any], limit: int = 100) -> list[str | None]:
    """Claim as a worker does; the keys of the runs it started."""
    rows = db.execute(CLAIM, claim_params(limit=limit)).fetchall()
    return [key_of(db, row[0]) for row in rows]


def later(db: psycopg.Connection[Any], seconds: float) -> None:
    """As if `seconds` passed for every bucket."""
    db.execute(
        "UPDATE fairlane.rate_buckets SET full_at = full_at - make_interval(secs => %s)",
        (seconds,),
    )


def queued(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM fairlane.runs WHERE status = 'QUEUED'").fetchone()
    assert row is not None
    return int(row[0])


def test_each_key_starts_its_burst_then_one_run_per_token(db: psycopg.Connection[Any]) -> None:
    for key in ("a", "b"):
        keyed(db, key, 5)
    settings = limits.set_queue(db, "acme", "default", rate_limit=2, rate_period_s=HOUR)
    assert (settings.rate_limit, settings.rate_period_s, settings.rate_burst) == (2, HOUR, None)
    assert Counter(claim(db)) == Counter({"a": 2, "b": 2})
    assert claim(db) == []
    later(db, HOUR / 2 - 1)
    assert claim(db) == []
    later(db, 1)
    assert Counter(claim(db)) == Counter("ab")
    assert claim(db) == []


def test_a_key_at_its_rate_does_not_hold_back_another(db: psycopg.Connection[Any]) -> None:
    keyed(db, "hot", 50)
    limits.set_queue(db, "acme", "default", rate_limit=3, rate_period_s=HOUR)
    assert claim(db) == ["hot"] * 3
    keyed(db, "light", 2)
    assert claim(db) == ["light", "light"]


def test_keyless_runs_share_the_queues_one_bucket(db: psycopg.Connection[Any]) -> None:
    keyed(db, None, 5)
    limits.set_queue(db, "acme", "default", rate_limit=3, rate_period_s=HOUR)
    assert claim(db) == [None] * 3
    assert claim(db) == []
    # In a queue that also has keyed runs, the keyless ones still share that bucket.
    keyed(db, "a", 2)
    assert claim(db) == ["a", "a"]
    later(db, HOUR)
    assert Counter(claim(db)) == Counter({None: 2})


def test_the_burst_bounds_a_start_after_a_quiet_spell(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 10)
    limits.set_queue(db, "acme", "default", rate_limit=6, rate_period_s=HOUR, rate_burst=2)
    assert claim(db) == ["a", "a"]
    later(db, 10 * HOUR)
    assert claim(db) == ["a", "a"]


def test_the_rate_and_the_concurrency_limit_both_hold(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 5)
    limits.set_queue(db, "acme", "default", concurrency_limit=1, rate_limit=3, rate_period_s=HOUR)
    assert claim(db) == ["a"]
    assert claim(db) == []
    db.execute("UPDATE fairlane.runs SET status = 'COMPLETED' WHERE status = 'EXECUTING'")
    assert claim(db) == ["a"]


def test_runs_over_the_rate_wait_and_none_is_dropped(db: psycopg.Connection[Any]) -> None:
    ids = keyed(db, "a", 7)
    limits.set_queue(db, "acme", "default", rate_limit=2, rate_period_s=HOUR)
    started: list[str | None] = []
    for _ in range(4):
        started += claim(db)
        drained = db.execute(
            "SELECT drained FROM fairlane.environments WHERE name = 'acme'"
        ).fetchone()
        # Its environment stays active while runs wait for a token.
        assert drained == (queued(db) == 0,)
        later(db, HOUR)
    assert started == ["a"] * 7
    rows = db.execute(
        "SELECT count(*) FROM fairlane.runs WHERE id = ANY(%s) AND status = 'EXECUTING'", (ids,)
    ).fetchone()
    assert rows == (7,)


def test_a_retry_takes_a_token_too(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 1)
    limits.set_queue(db, "acme", "default", rate_limit=1, rate_period_s=HOUR)
    assert claim(db) == ["a"]
    # Handed back as a retry is: QUEUED again.
    db.execute(
        "UPDATE fairlane.runs SET status = 'QUEUED', lease_token = NULL WHERE status = 'EXECUTING'"
    )
    assert claim(db) == []
    later(db, HOUR)
    assert claim(db) == ["a"]


def test_turning_the_rate_off_frees_every_waiting_run(db: psycopg.Connection[Any]) -> None:
    keyed(db, "a", 4)
    limits.set_queue(db, "acme", "default", rate_limit=1, rate_period_s=HOUR)
    assert claim(db) == ["a"]
    settings = limits.set_queue(db, "acme", "default", rate_limit=None)
    assert settings.rate_limit is None
    assert settings.rate_period_s is None
    assert claim(db) == ["a"] * 3


def test_other_queue_settings_leave_the_rate_alone(db: psycopg.Connection[Any]) -> None:
    limits.set_queue(db, "acme", "default", rate_limit=5, rate_period_s=60.0, rate_burst=2)
    settings = limits.set_queue(db, "acme", "default", concurrency_limit=3)
    assert (settings.rate_limit, settings.rate_period_s, settings.rate_burst) == (5, 60.0, 2)


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"rate_limit": 0}, "rate_limit"),
        ({"rate_limit": 1.5}, "rate_limit"),
        ({"rate_limit": 5, "rate_period_s": 0}, "rate_period_s"),
        ({"rate_limit": 5, "rate_period_s": float("nan")}, "rate_period_s"),
        ({"rate_limit": 5, "rate_burst": 0}, "rate_burst"),
        ({"rate_period_s": 10.0}, "rate_limit"),
    ],
)
def test_a_bad_rate_changes_nothing(
    db: psycopg.Connection[Any], change: dict[str, Any], setting: str
) -> None:
    limits.set_queue(db, "acme", "default", rate_limit=5)
    with pytest.raises(SettingError) as raised:
        limits.set_queue(db, "acme", "default", **change)
    assert raised.value.setting == setting
    row = db.execute(
        "SELECT rate_limit, rate_period_s, rate_burst FROM fairlane.queues"
        " WHERE environment = 'acme' AND name = 'default'"
    ).fetchone()
    assert row == (5, 1.0, None)


def test_two_claims_never_spend_one_token_twice(dsn: str, db: psycopg.Connection[Any]) -> None:
    """The second claim waits for the environment's row the first holds, then reads the
    bucket in a later statement: it sees the first claim's charge and starts nothing of a."""
    keyed(db, "a", 3)
    limits.set_queue(db, "acme", "default", rate_limit=1, rate_period_s=HOUR)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        first = a.start(CLAIM, claim_params(limit=10, worker_id=a.name)).result(timeout=30)
        assert len(first) == 1
        b.begin()
        pending = b.start(CLAIM, claim_params(limit=10, worker_id=b.name))
        b.blocked()
        assert b.blockers() == [a.pid]
        a.commit()
        second = pending.result(timeout=30)
        b.commit()
    assert second == []
    assert queued(db) == 2


def test_pruning_deletes_full_buckets_and_loses_no_charge(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A prune that meets a bucket a claim is charging waits for the claim and re-checks the
    new full_at: the charge stays."""
    for key in ("a", "b"):
        keyed(db, key, 3)
    limits.set_queue(db, "acme", "default", rate_limit=1, rate_period_s=HOUR)
    assert Counter(claim(db)) == Counter("ab")
    later(db, 2 * HOUR)
    with sessions(dsn, 2) as (a, b):
        a.begin()
        a.run(CLAIM, claim_params(limit=1, worker_id=a.name))
        pruning = b.start("SELECT fairlane.prune_rate_buckets()")
        b.blocked()
        a.commit()
        assert pruning.result(timeout=30) == [({"pruned": 1, "behind": False},)]
    rows = db.execute(
        "SELECT concurrency_key, full_at > now() FROM fairlane.rate_buckets"
    ).fetchall()
    assert len(rows) == 1
    assert rows[0][1] is True
    served = rows[0][0]
    assert claim(db) == ["b" if served == "a" else "a"]
    assert claim(db) == []


def test_pruning_is_a_periodic_job(db: psycopg.Connection[Any]) -> None:
    jobs = db.execute(
        "SELECT function, interval_s FROM fairlane.periodic_jobs WHERE name = 'prune_rate_buckets'"
    ).fetchall()
    assert jobs == [("prune_rate_buckets", 60.0)]


def test_the_cli_sets_and_shows_a_queues_rate(
    dsn: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    keyed(db, "a", 1)
    argv = ["limits", "queue", "acme", "default", "--rate", "10", "--rate-period", "60"]
    assert main([*argv, "--rate-burst", "3", "--dsn", dsn]) == 0
    assert "10/60s burst 3 per key" in capsys.readouterr().out
    assert main(["--json", "limits", "--dsn", dsn]) == 0
    (queue,) = json.loads(capsys.readouterr().out)["queues"]
    assert (queue["queue_rate_limit"], queue["queue_rate_period_s"]) == (10, 60.0)
    assert main(["limits", "queue", "acme", "default", "--rate-burst", "3", "--dsn", dsn]) == 2
    assert "rate_limit" in capsys.readouterr().err
    assert main(["limits", "queue", "acme", "default", "--rate", "off", "--dsn", dsn]) == 0
    settings = limits.set_queue(db, "acme", "default")
    assert settings.rate_limit is None
