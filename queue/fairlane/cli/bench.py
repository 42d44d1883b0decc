"""``fairlane bench enqueue|drain|latency|fairness|rate|batch|promote|retry|http-trigger|
ndjson-ingest``: one JSON line on stdout per run."""

from __future__ import annotations

import argparse
from typing import Any

from fairlane.tools.bench import (
    batch,
    drain,
    enqueue,
    fairness,
    http_trigger,
    latency,
    ndjson_ingest,
    promote,
    rate,
    retry,
)
from fairlane.tools.bench.common import LOOPS


def add_parser(commands: Any) -> None:
    """Add ``bench`` and its scenarios to the ``fairlane`` command's subparsers."""
    bench = commands.add_parser(
        "bench",
        help="benchmarks on a fresh database: enqueue, drain, latency, fairness, rate, batch, "
        "promote, retry, http-trigger, ndjson-ingest",
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
        "--loop", choices=LOOPS, default="asyncio", help="event loop (uvloop must be installed)"
    )
    scenarios = bench.add_subparsers(dest="scenario", required=True)
    for module in (enqueue, drain, latency, fairness, rate, batch, promote, retry):
        module.add_parser(scenarios, common)
    # The HTTP API (the web extra): fairlane serve in a process of its own.
    for module in (http_trigger, ndjson_ingest):
        module.add_parser(scenarios, common)
