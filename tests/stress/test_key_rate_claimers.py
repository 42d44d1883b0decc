"""16 claimers race over 50 concurrency keys with a rate per key: however the claims interleave,
no key ever starts more than its burst and one period's rate in any period, nor more than its
burst and the rate over the whole race. Each claimer claims a few runs, ends the ones it claimed
before, and claims again, for a few seconds; every start reads and charges its key's bucket under
the environment's row lock (sql/claim/key_rates.sql), the case that lock must hold. Run with
`make stress` (CI runs it)."""

from __future__ import annotations

import math
import time
from typing import Any

import psycopg
import pytest

from fairlane import TriggerRequest, limits, trigger_many
from fairlane.tools.bench.key_rate import claimed_starts
from fairlane.tools.bench.rate import max_in_window
from tests.helpers import claim_params
from tests.stress.test_key_claimers import CLAIM, END, start

pytestmark = [pytest.mark.stress, pytest.mark.timeout(600)]

CLAIMERS = 16
KEYS = 50
RUNS_PER_KEY = 100
RATE = 5
PERIOD_S = 0.5
BURST = 5
RACE_S = 4.0


def claimer(dsn: str, name: str, until: float, errors: list[BaseException]) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            held: list[int] = []
            while time.monotonic() < until:
                if held:
                    conn.execute(END, (held,))
                params = claim_params(limit=4, worker_id=name)
                held = [row[0] for row in conn.execute(CLAIM, params).fetchall()]
    except BaseException as error:  # reported by the test
        errors.append(error)


def test_no_key_ever_starts_past_its_rate(dsn: str, db: psycopg.Connection[Any]) -> None:
    requests = [
        TriggerRequest("t", i, environment="acme", concurrency_key=f"key-{i % KEYS:02}")
        for i in range(KEYS * RUNS_PER_KEY)
    ]
    trigger_many(db, requests)
    limits.set_queue(
        db, "acme", "default", rate_limit=RATE, rate_period_s=PERIOD_S, rate_burst=BURST
    )
    errors: list[BaseException] = []
    until = time.monotonic() + RACE_S
    claimers = [start(claimer, dsn, f"c{i}", until, errors) for i in range(CLAIMERS)]
    for thread in claimers:
        thread.join(timeout=500)
    assert errors == []
    starts = claimed_starts(db)
    assert len(starts) == KEYS, "every key started runs"
    for key, times in starts.items():
        assert max_in_window(times, PERIOD_S) <= BURST + RATE, key
        span = max(times) - min(times)
        assert len(times) <= BURST + math.ceil(RATE * span / PERIOD_S) + 1, key
    print(f"\n{sum(map(len, starts.values()))} starts over {KEYS} keys; none past its rate")
