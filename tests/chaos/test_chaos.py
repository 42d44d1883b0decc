"""Chaos: real ``fairlane worker`` processes against a throwaway cluster that is restarted,
crashed, frozen and has its connections cut, while a handler writes a ledger of every
execution. Each scenario asserts the ledger's verdict (tests/chaos/harness.py: nothing lost,
every run final, duplicates only after a killed or stopped worker, no handler more than 1 s
past its lease deadline) and prints its figures. ``make chaos``; CI runs it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.chaos.harness import (
    Fleet,
    completed,
    drained,
    orphans_restarted_after,
    poll,
    report,
    trigger_runs,
    until_progress,
    verdict,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

SEED = 20240917
DRAIN_WITHIN_S = 150.0


def finish(dsn: str, run_ids: list[int], fleet: Fleet, scenario: str, **recoveries: object) -> None:
    poll(lambda: drained(dsn, run_ids), within=DRAIN_WITHIN_S, what="every run final")
    fleet.stop_all()
    result = verdict(dsn, run_ids, fleet)
    print("\n" + report(scenario, result, fleet, **recoveries))  # type: ignore[arg-type]
    assert not result.problems, result.problems[:20]
    assert not fleet.tracebacks(), fleet.tracebacks()


def at_fraction(dsn: str, total: int, fraction: float) -> None:
    poll(lambda: completed(dsn) >= total * fraction, within=DRAIN_WITHIN_S, what=f"{fraction:.0%}")


def test_sigkill_random_workers_during_a_drain(
    chaos_dsn: str, make_fleet: Callable[..., Fleet]
) -> None:
    """Five times during a drain of 1,200 runs a random worker is killed (SIGKILL) and a new
    one started. Its runs wait out their lease (3 s) and are run again elsewhere: the recovery
    is from the kill to the last of its runs started again."""
    rng = random.Random(SEED)
    run_ids = trigger_runs(chaos_dsn, 1200, seconds=(0.05, 0.4), seed=SEED)
    fleet = make_fleet(lease_seconds=3)
    fleet.start(3)
    kills: list[tuple[int, float]] = []
    for fraction in (0.1, 0.25, 0.4, 0.55, 0.7):
        at_fraction(chaos_dsn, len(run_ids), fraction)
        victim = rng.choice(fleet.alive())
        kills.append((victim.pid, fleet.kill(victim)))
        fleet.start(1)
    poll(lambda: drained(chaos_dsn, run_ids), within=DRAIN_WITHIN_S, what="every run final")
    recoveries = [orphans_restarted_after(chaos_dsn, pid, at) for pid, at in kills]
    finish(chaos_dsn, run_ids, fleet, "SIGKILL workers", rerun=recoveries)
