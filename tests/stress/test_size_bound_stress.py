"""Size bounds under load: 8 threads trigger into size-limited queues and an environment while
4 claimers take runs and either end them or send them back to wait (a retry's DELAYED, a
returned run's QUEUED), which no trigger sees. A sampler reads, in one snapshot, every bound
and the runs waiting under it, every 10 ms: a bound is never below them. Each bound a trigger
trusted without counting is one that held there, so the limits hold as far as triggers go (runs
that come back to wait may pass a limit, as a retry always could). Run with `make stress`."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import TriggerRequest, limits
from fairlane.engine.sqlfiles import query
from fairlane.errors import QueueSizeLimitExceeded
from tests.helpers import claim_params

pytestmark = [pytest.mark.stress, pytest.mark.timeout(600)]

TRIGGERERS = 8
CALLS = 150
CLAIMERS = 4
QUEUES = ("q0", "q1", "q2")
QUEUE_LIMIT = 40  # each queue of environment "acme"
ENVIRONMENT_LIMIT = 60  # environment "tenant", over its queues
SAMPLE_EVERY_S = 0.01
CLAIM = query("claim_runs", "fairlane")
BELOW = """
SELECT b.environment, b.scope, b.queue, b.bound, count(r.id) AS waiting
FROM fairlane.size_bounds b
LEFT JOIN fairlane.runs r
  ON r.environment = b.environment AND r.status IN ('QUEUED', 'DELAYED')
 AND (b.scope = 'queue' AND r.queue = b.queue
      OR b.scope = 'environment' AND r.queue <> '__batches__')
GROUP BY b.environment, b.scope, b.queue, b.bound
HAVING count(r.id) > b.bound
"""
# What the claimers do with what they took: end it, or send it back to wait.
SETTLE = """
UPDATE fairlane.runs SET status = s.status, lease_token = NULL, worker_id = NULL,
       finished_at = CASE WHEN s.status = 'COMPLETED' THEN now() END
FROM unnest(%s::bigint[], %s::text[]) AS s(id, status)
WHERE runs.id = s.id
"""


def start(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def triggerer(dsn: str, seed: int, outcomes: list[str], errors: list[BaseException]) -> None:
    rng = random.Random(seed)
    try:
        with psycopg.connect(dsn) as conn:
            for _ in range(CALLS):
                environment = rng.choice(["acme", "tenant"])
                keyed = rng.random() < 0.3
                requests = [
                    TriggerRequest(
                        "t",
                        environment=environment,
                        queue=rng.choice(QUEUES),
                        idempotency_key=f"k{rng.randrange(10**9)}" if keyed else None,
                    )
                    for _ in range(rng.randint(1, 4))
                ]
                try:
                    with conn.transaction():
                        fairlane.trigger_many(conn, requests)
                    outcomes.append("triggered")
                except QueueSizeLimitExceeded:
                    outcomes.append("full")
    except BaseException as error:  # reported by the test
        errors.append(error)


def claimer(dsn: str, seed: int, done: threading.Event, errors: list[BaseException]) -> None:
    rng = random.Random(1000 + seed)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not done.is_set():
                params = claim_params(limit=5, worker_id=f"c{seed}")
                held = [row[0] for row in conn.execute(CLAIM, params).fetchall()]
                if held:
                    statuses = [rng.choice(["COMPLETED", "DELAYED", "QUEUED"]) for _ in held]
                    conn.execute(SETTLE, (held, statuses))
    except BaseException as error:  # reported by the test
        errors.append(error)
        done.set()


def sampler(
    dsn: str, done: threading.Event, found: list[Any], scopes: set[str], errors: list[Any]
) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not done.wait(SAMPLE_EVERY_S):
                found.extend(conn.execute(BELOW).fetchall())
                kept = conn.execute("SELECT DISTINCT scope FROM fairlane.size_bounds")
                scopes.update(row[0] for row in kept.fetchall())
    except BaseException as error:  # reported by the test
        errors.append(error)


def test_no_bound_is_ever_below_the_runs_waiting_under_it(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    for queue in QUEUES:
        limits.set_queue(db, "acme", queue, size_limit=QUEUE_LIMIT)
    limits.set_environment(db, "tenant", size_limit=ENVIRONMENT_LIMIT)
    done = threading.Event()
    errors: list[BaseException] = []
    found: list[Any] = []
    scopes: set[str] = set()
    outcomes: list[str] = []
    watching = start(sampler, dsn, done, found, scopes, errors)
    claimers = [start(claimer, dsn, n, done, errors) for n in range(CLAIMERS)]
    triggerers = [start(triggerer, dsn, n, outcomes, errors) for n in range(TRIGGERERS)]
    for thread in triggerers:
        thread.join(timeout=500)
    done.set()
    for thread in [*claimers, watching]:
        thread.join(timeout=30)
    assert errors == []
    assert found == []
    # Calls met room and full queues both, and the samples saw bounds of both scopes.
    assert outcomes.count("triggered") + outcomes.count("full") == TRIGGERERS * CALLS
    assert outcomes.count("triggered") > 0
    assert outcomes.count("full") > 0
    assert scopes == {"queue", "environment"}
