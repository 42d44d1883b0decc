"""Chaos for durable execution: workers are killed (SIGKILL) while runs are between steps and
while they wait without a worker. Every run must end COMPLETED once with the right result, each
step recorded once, and each step's function run once, except as docs/durable-execution.md
allows: again only when the worker that ran it was killed before its result was written."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from fairlane import Client, TriggerRequest
from tests.chaos.harness import Fleet, drained, read
from tests.helpers import poll

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

SEED = 20261206
RUNS = 60
STEPS = 9
DRAIN_WITHIN_S = 150.0


def step_calls(dsn: str) -> int:
    return int(read(dsn, "SELECT count(*) FROM chaos_steps")[0][0])


def test_sigkill_workers_between_steps_and_while_runs_wait(
    chaos_dsn: str, make_fleet: Callable[..., Fleet]
) -> None:
    rng = random.Random(SEED)
    requests = [
        TriggerRequest("chaos.steps", {"steps": STEPS, "wait_s": round(rng.uniform(0.1, 0.5), 3)})
        for _ in range(RUNS)
    ]
    with Client(chaos_dsn) as client:
        run_ids = client.trigger_many(requests)
    fleet = make_fleet(lease_seconds=2, wait_in_memory=0)
    fleet.start(3)
    kills = 0
    total = RUNS * STEPS
    for fraction in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85):
        target = total * fraction
        poll(
            lambda: step_calls(chaos_dsn) >= target,  # noqa: B023 - called before the next turn
            within=DRAIN_WITHIN_S,
            what=f"{fraction:.0%} of the steps",
        )
        fleet.kill(rng.choice(fleet.alive()))
        kills += 1
        fleet.start(1)
    poll(lambda: drained(chaos_dsn, run_ids), within=DRAIN_WITHIN_S, what="every run final")
    fleet.stop_all()

    finished = read(
        chaos_dsn,
        "SELECT id, status, result FROM fairlane.runs WHERE id = ANY(%s) ORDER BY id",
        (run_ids,),
    )
    expected = sum(index * index for index in range(STEPS))
    assert [(status, result) for _, status, result in finished] == [("COMPLETED", expected)] * RUNS
    recorded = read(
        chaos_dsn,
        "SELECT run_id, position, status, result FROM fairlane.run_steps"
        " WHERE kind = 'STEP' ORDER BY run_id, position",
    )
    # Each step recorded once, COMPLETED with its function's result.
    by_run = Counter(run_id for run_id, _, _, _ in recorded)
    assert by_run == Counter({run_id: STEPS for run_id in run_ids})
    assert {status for _, _, status, _ in recorded} == {"COMPLETED"}
    calls = read(chaos_dsn, "SELECT run_id, step, worker_pid FROM chaos_steps")
    per_step = Counter((run_id, step) for run_id, step, _ in calls)
    assert set(per_step) == {(run_id, step) for run_id in run_ids for step in range(STEPS)}
    # A step ran more than once only if a killed worker ran it (between its function and its
    # record): every surplus call is a killed worker's.
    repeated = {key for key, n in per_step.items() if n > 1}
    killed = set(fleet.killed)
    for run_id, step in repeated:
        pids = [pid for r, s, pid in calls if (r, s) == (run_id, step)]
        assert sum(pid not in killed for pid in pids) <= 1, (run_id, step, pids)
    assert not fleet.tracebacks(), fleet.tracebacks()
    print(
        f"\nsteps chaos: {RUNS} runs x {STEPS} steps, {kills} workers killed, "
        f"{len(calls)} step calls for {RUNS * STEPS} steps, {len(repeated)} steps ran twice "
        "(each by a killed worker)"
    )
