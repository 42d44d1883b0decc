"""The steps of a sitting, in the order they run.

Within a repetition, the steps that fill one row of the table run back to back, one per side,
so every side of a row sees the same load on the shared machine; every other repetition runs
them in the reverse side order, so that no side always goes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fairlane.tools.bench.suite.sides import (
    CAPPED_TENANTS,
    CAPS,
    ENQUEUE,
    FAIRLANE,
    KEYS,
    LATENCY,
    TENANTS,
    Side,
    keys_case,
    label,
    tenants_case,
)


@dataclass(frozen=True)
class Step:
    """One benchmark run: a fairlane scenario or a peer script, and its label."""

    side: Side
    case: str
    size: int  # runs drained or enqueued; latency: runs picked up
    argv: tuple[str, ...]  # fairlane: after ``fairlane bench``; a peer: after its script
    rep: int

    @property
    def label(self) -> str:
        return label(self.side, self.case, None if self.case == LATENCY else self.size)


# fairlane's best setting, concurrency / claim batch: the largest claims that still drained
# no-op runs faster at 20k, 100k and 1M, timed from the worker's start. Larger claims gained
# mostly in the first claim, which the harness's timing leaves out (docs/performance.md; the
# figures from bench/sittings/06-run-metrics-per-written-batch-a-lighter-bulk-trigger.md on).
BEST_CONCURRENCY = 4000
BEST_CLAIM_BATCH = 2000


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]  # the first one is the size of every row but the larger drains
    reps: int = 1
    concurrency: int = BEST_CONCURRENCY
    claim_batch: int = BEST_CLAIM_BATCH
    latency_runs: int = 300


def best_drain(side: Side, size: int, settings: Settings, rep: int) -> Step:
    if side is FAIRLANE:
        argv = ("drain", "--runs", str(size), *_best_flags(settings))
        if size == max(settings.sizes):
            # The table's size row: the largest drain also measures the runs table around it.
            argv += ("--sizes",)
    else:
        argv = ("throughput", "--config", _config(side.best), "-n", str(size))
    return Step(side, side.best, size, argv, rep)


def c10_drain(side: Side, size: int, rep: int) -> Step:
    if side is FAIRLANE:
        argv: tuple[str, ...] = ("drain", "--runs", str(size), "--concurrency", "10")
    else:
        argv = ("throughput", "--config", _config(side.c10), "-n", str(size))
    return Step(side, side.c10, size, argv, rep)


def tenants_drain(
    tenants: int, size: int, settings: Settings, rep: int, c10: bool, cap: int | None = None
) -> Step:
    flags = ("--concurrency", "10") if c10 else _best_flags(settings)
    argv = ("drain", "--runs", str(size), *flags, "--tenants", str(tenants))
    if cap is not None:
        argv += ("--env-cap", str(cap))
    return Step(FAIRLANE, tenants_case(tenants, c10, cap), size, argv, rep)


def tenants_drains(size: int, settings: Settings, rep: int, c10: bool) -> list[Step]:
    """Over one, 1,000 and 10,000 environments; then 10,000 capped at 1 and at 5; then one
    environment's runs over 10,000 concurrency keys."""
    spread = [tenants_drain(tenants, size, settings, rep, c10) for tenants in TENANTS]
    capped = [tenants_drain(CAPPED_TENANTS, size, settings, rep, c10, cap) for cap in CAPS]
    flags = ("--concurrency", "10") if c10 else _best_flags(settings)
    keyed = Step(
        FAIRLANE,
        keys_case(KEYS, c10),
        size,
        ("drain", "--runs", str(size), *flags, "--keys", str(KEYS)),
        rep,
    )
    return [*spread, *capped, keyed]


def latency(side: Side, settings: Settings, rep: int) -> Step:
    runs = str(settings.latency_runs)
    argv = ("latency", "--runs", runs) if side is FAIRLANE else ("latency", "--latency-jobs", runs)
    return Step(side, LATENCY, settings.latency_runs, argv, rep)


def plan(settings: Settings, sides: Sequence[Side]) -> list[Step]:
    """Every step of the sitting. ``sides`` are fairlane and the peers that are installed."""
    steps: list[Step] = []
    for rep in range(1, settings.reps + 1):
        order = list(sides) if rep % 2 else list(reversed(sides))
        for group in _groups(settings, order, rep):
            steps.extend(group)
    return steps


def _groups(settings: Settings, order: list[Side], rep: int) -> list[list[Step]]:
    base, *larger = settings.sizes
    groups = [
        [best_drain(side, base, settings, rep) for side in order],
        [c10_drain(side, base, rep) for side in order],
        tenants_drains(base, settings, rep, c10=False),
        tenants_drains(base, settings, rep, c10=True),
        [Step(FAIRLANE, ENQUEUE, base, ("enqueue", "--runs", str(base)), rep)],
        [latency(side, settings, rep) for side in order],
    ]
    for size in larger:
        groups.append(
            [best_drain(side, size, settings, rep) for side in order if _runs_at(side, size)]
        )
    return groups


def _runs_at(side: Side, size: int) -> bool:
    return side.max_best_size is None or size <= side.max_best_size


def _best_flags(settings: Settings) -> tuple[str, ...]:
    return ("--concurrency", str(settings.concurrency), "--claim-batch", str(settings.claim_batch))


def _config(case: str) -> str:
    """``throughput/tuned`` -> ``tuned``: the harness preset the case runs."""
    return case.rsplit("/", 1)[1]
