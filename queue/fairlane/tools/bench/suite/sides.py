"""Who the suite measures, and which of their steps fill which cell of the table.

fairlane's own scenarios run beside two peers of the peer harness (a set of scripts kept
outside this repository, one JSON line per run): graphile-worker, the fastest peer, and
PgQueuer, the Python one. A peer's cases are named like the harness labels its steps
(``graphile/throughput/tuned``), so a suite results file reads like one of the harness's own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Side:
    """One column of the table."""

    name: str  # the first part of a step label
    title: str  # the column heading
    best: str  # case of the drain at the side's high-throughput setting
    c10: str  # case of the drain at concurrency 10
    rate_field: str  # a drain line's runs per second, timed from the first handler call
    # A drain line's rate of the bulk enqueue (1,000 per call) that queued its runs: a peer's
    # enqueue figures all come from there (fairlane's at the enqueue step's size: ENQUEUE_RATE).
    filling_field: str
    max_best_size: int | None = None  # larger drains are not run (minutes each)
    script: str = ""  # the harness file that runs a peer's steps
    runtime: str = ""  # "python" or "node": the harness interpreter the script needs
    package: str = ""  # what must import (Python) or resolve (Node) for the peer to run


FAIRLANE = Side(
    name="fairlane",
    title="fairlane",
    best="drain/best",
    c10="drain/c10",
    rate_field="process_runs_per_s",
    filling_field="enqueue_runs_per_s",
)
GRAPHILE = Side(
    name="graphile",
    title="graphile-worker",
    best="throughput/tuned",
    c10="throughput/c10",
    rate_field="process_jobs_per_s",
    filling_field="enqueue_jobs_per_s",
    script="graphile_bench.js",
    runtime="node",
    package="graphile-worker",
)
PGQUEUER = Side(
    name="pgqueuer",
    title="PgQueuer",
    best="throughput/batch100",
    c10="throughput/c10",
    rate_field="process_jobs_per_s",
    filling_field="enqueue_jobs_per_s",
    # The harness stops at 100k for PgQueuer: at its rate a 1M drain would take minutes.
    max_best_size=100_000,
    script="pgqueuer_bench.py",
    runtime="python",
    package="pgqueuer",
)
PEERS = (GRAPHILE, PGQUEUER)
SIDES = (FAIRLANE, *PEERS)

ENQUEUE = "enqueue"
# fairlane's enqueue step's line: its runs per second.
ENQUEUE_RATE = "runs_per_s"
LATENCY = "latency"
# The drains spread over tenants: one, and the long tail of a multi-tenant platform.
TENANTS = (1, 1000, 10_000)
# The harness's default job count: its labels carry no size suffix at this size.
DEFAULT_SIZE = 20_000


# The drains over the most tenants again with every environment and queue capped low: the caps
# must hold (the drain samples the most EXECUTING per environment) at the same rate.
CAPPED_TENANTS = 10_000
CAPS = (1, 5)


def tenants_case(tenants: int, c10: bool = False, cap: int | None = None) -> str:
    return f"drain/tenants{tenants}" + (f"/cap{cap}" if cap else "") + ("/c10" if c10 else "")


# The drain spread over concurrency keys, one or two runs each: the keyed claim's cost against
# the same drain without keys (the best and concurrency-10 drains).
KEYS = 10_000


def keys_case(keys: int, c10: bool = False) -> str:
    return f"drain/keys{keys}" + ("/c10" if c10 else "")


def size_text(size: int) -> str:
    """20000 -> 20k, 1000000 -> 1M, 2500 -> 2500."""
    if size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    if size >= 1000 and size % 1000 == 0:
        return f"{size // 1000}k"
    return str(size)


def parse_size(text: str) -> int:
    """``20000``, ``20k`` or ``1M``; a clear ValueError otherwise."""
    cleaned = text.strip().replace("_", "")
    factor = {"k": 1000, "m": 1_000_000}.get(cleaned[-1:].lower(), 1)
    digits = cleaned[:-1] if factor > 1 else cleaned
    if not digits.isdigit() or int(digits) * factor <= 0:
        raise ValueError(f"not a size: {text!r} (examples: 20000, 20k, 1M)")
    return int(digits) * factor


def label(side: Side, case: str, size: int | None) -> str:
    """``graphile/throughput/tuned@100k`` as the harness names it; no suffix at 20k."""
    suffix = "" if size is None or size == DEFAULT_SIZE else f"@{size_text(size)}"
    return f"{side.name}/{case}{suffix}"
