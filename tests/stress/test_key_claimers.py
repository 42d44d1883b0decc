"""16 claimers race over 1,000 concurrency keys at a limit of 1 per key: a sampler reads the
executing runs every 10 ms and never finds a key running twice at once. Each claimer claims a
few runs, ends the ones it claimed before, and claims again, until every run has ended; so
slots are taken and released by many transactions at once, the case the environment's row lock
and the derived counts of sql/claim/keys.sql must hold. Run with `make stress` (CI runs it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.engine.sqlfiles import query
from tests.helpers import claim_params

pytestmark = [pytest.mark.stress, pytest.mark.timeout(600)]

CLAIMERS = 16
KEYS = 1_000
RUNS_PER_KEY = 3
SAMPLE_EVERY_S = 0.01
CLAIM = query("claim_runs", "fairlane")
TWICE = """
SELECT concurrency_key, count(*) FROM fairlane.runs
WHERE status = 'EXECUTING' GROUP BY concurrency_key HAVING count(*) > 1
"""
END = "UPDATE fairlane.runs SET status = 'COMPLETED', finished_at = now() WHERE id = ANY(%s)"
LEFT = "SELECT count(*) FROM fairlane.runs WHERE status <> 'COMPLETED'"


def left(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(LEFT).fetchone()
    assert row is not None
    return int(row[0])


def claimer(dsn: str, name: str, done: threading.Event, errors: list[BaseException]) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            held: list[int] = []
            while not done.is_set():
                if held:
                    conn.execute(END, (held,))
                params = claim_params(limit=4, worker_id=name)
                held = [row[0] for row in conn.execute(CLAIM, params).fetchall()]
                if not held and left(conn) == 0:
                    return
    except BaseException as error:  # reported by the test
        errors.append(error)
        done.set()


def sampler(
    dsn: str, done: threading.Event, found: list[Any], samples: list[int], errors: list[Any]
) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not done.wait(SAMPLE_EVERY_S):
                found.extend(conn.execute(TWICE).fetchall())
                samples.append(1)
    except BaseException as error:  # reported by the test
        errors.append(error)


def start(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_no_key_ever_runs_twice_at_once(dsn: str, db: psycopg.Connection[Any]) -> None:
    requests = [
        TriggerRequest("t", i, environment="acme", concurrency_key=f"key-{i % KEYS:04}")
        for i in range(KEYS * RUNS_PER_KEY)
    ]
    trigger_many(db, requests)
    limits.set_queue(db, "acme", "default", concurrency_limit=1)
    done = threading.Event()
    errors: list[BaseException] = []
    found: list[Any] = []
    samples: list[int] = []
    watching = start(sampler, dsn, done, found, samples, errors)
    claimers = [start(claimer, dsn, f"c{i}", done, errors) for i in range(CLAIMERS)]
    for thread in claimers:
        thread.join(timeout=500)
    done.set()
    watching.join(timeout=30)
    assert errors == []
    assert found == []
    assert left(db) == 0
    print(f"\n{len(samples)} samples of the executing runs, none with a key twice")
    assert samples
