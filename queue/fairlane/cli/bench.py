"""``fairlane bench enqueue|drain|latency|fairness|keys|key-rate|rate|batch|promote|retry|
transitions|waits|periodic|http-trigger|ndjson-ingest``: one JSON line on stdout per run;
``fairlane bench soak``: one per minute and a verdict; ``fairlane bench suite``: the
side-by-side table."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from fairlane.tools.bench import (
    batch,
    drain,
    enqueue,
    fairness,
    http_trigger,
    key_rate,
    keys,
    latency,
    ndjson_ingest,
    periodic,
    promote,
    rate,
    retry,
    soak,
    suite,
    transitions,
    waits,
)
from fairlane.worker.process import LOOP_CHOICES


def add_parser(commands: Any) -> None:
    """Add ``bench`` and its scenarios to the ``fairlane`` command's subparsers."""
    bench = commands.add_parser(
        "bench",
        help="benchmarks on a fresh database: enqueue, drain, latency, fairness, keys, key-rate, "
        "rate, "
        "batch, promote, retry, transitions, waits, periodic, http-trigger, ndjson-ingest, soak; "
        "suite: all of them beside the peer harness, as one table",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="server URL; a database is created on it per run "
        "(default: $DATABASE_URL or postgresql://127.0.0.1:5432/postgres)",
    )
    common.add_argument("--keep-db", action="store_true", help="do not drop the database")
    common.add_argument(
        "--run-lines",
        action="store_true",
        help="log the worker's line per run (off by default: the peers log none, and at "
        "tens of thousands of runs a second the lines cost more than the runs)",
    )
    common.add_argument(
        "--loop",
        choices=LOOP_CHOICES,
        default="auto",
        help="event loop, as `fairlane worker --loop`: auto takes uvloop when installed",
    )
    scenarios = bench.add_subparsers(dest="scenario", required=True)
    scenario_modules = (
        enqueue,
        drain,
        latency,
        fairness,
        keys,
        key_rate,
        rate,
        batch,
        promote,
        retry,
        transitions,
        soak,
        waits,
        periodic,
        suite,
    )
    for module in scenario_modules:
        module.add_parser(scenarios, common)
    # The HTTP API (the web extra): fairlane serve in a process of its own.
    for module in (http_trigger, ndjson_ingest):
        module.add_parser(scenarios, common)
    bench.set_defaults(before=quiet_run_lines)


def quiet_run_lines(args: argparse.Namespace) -> None:
    """Without ``--run-lines`` the worker's per-run lines are off (warnings still show)."""
    if not args.run_lines:
        logging.getLogger("fairlane.worker.runs").setLevel(logging.WARNING)
