"""Keyed bulk triggers from 16 threads at once, requests in random order, into size-limited
queues and environments: no deadlock, and no limit is ever passed.

Each thread makes 200 ``trigger_many`` calls of 2 to 5 requests with idempotency keys (and
some with debounce keys) drawn from pools, so that calls contend on every kind of lock the
keyed path takes. The queues fill within the first calls; a drain thread then ends a few
waiting runs every 20 calls (COMPLETED keeps a run's key, FAILED frees it), so calls keep
meeting queues at their limit, and checks the limits each time.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

import fairlane
from fairlane import Debounce, TriggerRequest, limits
from fairlane.errors import QueueSizeLimitExceeded

pytestmark = [pytest.mark.stress, pytest.mark.timeout(600)]

THREADS = 16
CALLS = 200
QUEUE_LIMIT = 20  # each queue of environment "acme"
ENVIRONMENT_LIMIT = 30  # environment "tenant", over its four queues
QUEUES = ("q0", "q1", "q2", "q3")
KEYS = 1000  # idempotency keys per environment
DRAIN_EVERY = 20  # calls


def random_call(rng: random.Random) -> list[TriggerRequest]:
    requests = []
    for _ in range(rng.randint(2, 5)):
        debounce = None
        if rng.random() < 0.3:
            trailing = rng.random() < 0.5
            debounce = Debounce(
                f"d{rng.randrange(10)}", "1m", mode="trailing" if trailing else "leading"
            )
        requests.append(
            TriggerRequest(
                "t",
                rng.randrange(1000),
                environment=rng.choice(["acme", "tenant"]),
                queue=rng.choice(QUEUES),
                idempotency_key=f"k{rng.randrange(KEYS)}",
                debounce=debounce,
            )
        )
    rng.shuffle(requests)
    return requests


def over_limit(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Queues and environments holding more waiting runs than their limit."""
    return conn.execute(
        """
        SELECT 'queue', r.environment || '/' || r.queue, count(*)
        FROM fairlane.runs r JOIN fairlane.queues q
          ON q.environment = r.environment AND q.name = r.queue
        WHERE r.status IN ('QUEUED', 'DELAYED') AND q.size_limit IS NOT NULL
        GROUP BY r.environment, r.queue, q.size_limit HAVING count(*) > q.size_limit
        UNION ALL
        SELECT 'environment', r.environment, count(*)
        FROM fairlane.runs r JOIN fairlane.environments e ON e.name = r.environment
        WHERE r.status IN ('QUEUED', 'DELAYED') AND e.size_limit IS NOT NULL
        GROUP BY r.environment, e.size_limit HAVING count(*) > e.size_limit
        """
    ).fetchall()


class Contention:
    """The callers and the drain of one test, and what they saw."""

    def __init__(self, dsn: str, db: psycopg.Connection[Any]) -> None:
        self.dsn = dsn
        self.db = db  # the drain's: the test does not use it meanwhile
        self.outcomes = [Counter[str]() for _ in range(THREADS)]
        self.failures: list[BaseException] = []
        self.overfilled: list[tuple[Any, ...]] = []
        self.progress = threading.Condition()
        self.calls_made = 0

    def run(self) -> Counter[str]:
        callers = [threading.Thread(target=self.caller, args=(n,)) for n in range(THREADS)]
        drainer = threading.Thread(target=self.drain)
        for thread in [drainer, *callers]:
            thread.start()
        for thread in [*callers, drainer]:
            thread.join(timeout=120)
        assert not self.failures, self.failures[:3]
        return sum(self.outcomes, Counter())

    def caller(self, seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(self.dsn) as conn:
                for _ in range(CALLS):
                    self.outcomes[seed][self.call(conn, random_call(rng))] += 1
                    with self.progress:
                        self.calls_made += 1
                        self.progress.notify_all()
        except BaseException as error:  # reported by run()
            self.failures.append(error)

    @staticmethod
    def call(conn: psycopg.Connection[Any], requests: list[TriggerRequest]) -> str:
        try:
            with conn.transaction():
                fairlane.trigger_many(conn, requests)
        except QueueSizeLimitExceeded:
            return "full"
        except psycopg.errors.DeadlockDetected:
            return "deadlock"
        return "triggered"

    def drain(self) -> None:
        rng = random.Random(0)
        for mark in range(DRAIN_EVERY, THREADS * CALLS, DRAIN_EVERY):
            with self.progress:
                while self.calls_made < mark:
                    if not self.progress.wait(timeout=60):
                        return  # a caller died: run() reports it
            self.overfilled.extend(over_limit(self.db))
            self.db.execute(
                "UPDATE fairlane.runs SET status = %s, finished_at = now() WHERE id IN"
                " (SELECT id FROM fairlane.runs WHERE status IN ('QUEUED', 'DELAYED')"
                "  ORDER BY random() LIMIT 5)",
                (rng.choice(["COMPLETED", "FAILED"]),),
            )


def test_keyed_bulk_triggers_in_random_order_never_deadlock_nor_overfill(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    for queue in QUEUES:
        limits.set_queue(db, "acme", queue, size_limit=QUEUE_LIMIT)
    limits.set_environment(db, "tenant", size_limit=ENVIRONMENT_LIMIT)
    contention = Contention(dsn, db)
    total = contention.run()
    assert total["deadlock"] == 0, total
    assert total["triggered"] + total["full"] == THREADS * CALLS
    # Calls met queues with room and queues at their limit, and none was ever passed.
    assert total["triggered"] > 0, total
    assert total["full"] > 0, total
    assert contention.overfilled == []
    assert over_limit(db) == []
