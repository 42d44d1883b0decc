"""``fairlane bench suite``: fairlane beside the peer harness, in one sitting, as one table.

Runs fairlane's drain, enqueue and latency scenarios and, when the peer harness is installed
(``PEERS_DIR``), graphile-worker's and PgQueuer's matching steps, interleaved so both see the
same load; appends every step's JSON line to a results file; prints the markdown table of
medians and the ratios the performance targets are stated in. ``--table FILE`` prints the
table of an existing results file (the suite's, or the harness's own) and runs nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fairlane.tools.bench.common import server_url
from fairlane.tools.bench.suite.plan import BEST_CLAIM_BATCH, BEST_CONCURRENCY, Settings
from fairlane.tools.bench.suite.sides import parse_size
from fairlane.tools.bench.suite.sitting import Sitting, run_sitting
from fairlane.tools.bench.suite.table import summarize

DEFAULT_SIZES = "20k,100k,1M"
RESULTS_DIR = Path("bench") / "results"
INTERRUPTED = 130  # the shell's status for a command ended by SIGINT


def main(args: argparse.Namespace) -> int:
    if args.table:
        text = Path(args.table).read_text()
        sys.stdout.write(summarize(json.loads(line) for line in text.splitlines() if line.strip()))
        return 0
    sitting = sitting_from(args, os.environ)
    try:
        lines = run_sitting(sitting, os.environ)
    except KeyboardInterrupt:
        sys.stderr.write(f"interrupted: the lines of the steps that ended are in {sitting.out}\n")
        return INTERRUPTED
    sys.stdout.write(summarize(lines))
    sys.stdout.write(f"\n{len(lines) - 1} step lines appended to {sitting.out}\n")
    return 0


def sitting_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Sitting:
    sizes = args.sizes[:1] if args.quick else args.sizes
    concurrency, claim_batch = args.best
    settings = Settings(sizes, args.reps, concurrency, claim_batch, args.latency_runs)
    dsn = getattr(args, "dsn", None)
    flags = [*(["--dsn", dsn] if dsn else []), "--loop", args.loop]
    flags += [
        flag for flag, on in (("--run-lines", args.run_lines), ("--keep-db", args.keep_db)) if on
    ]
    today = datetime.date.today().isoformat()
    return Sitting(
        settings=settings,
        out=Path(args.out) if args.out else RESULTS_DIR / f"{today}.jsonl",
        server=server_url(dsn),
        named_server=dsn or environ.get("DATABASE_URL") or None,
        fairlane_flags=tuple(flags),
        peers_dir=args.peers_dir,
        step_timeout=args.step_timeout,
        only=args.only,
    )


def sizes_option(text: str) -> tuple[int, ...]:
    try:
        sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not sizes:
        raise argparse.ArgumentTypeError("no size given")
    return tuple(sizes)


def best_option(text: str) -> tuple[int, int]:
    concurrency, _, claim_batch = text.partition("/")
    if not (concurrency.isdigit() and claim_batch.isdigit()) or "0" in (concurrency, claim_batch):
        raise argparse.ArgumentTypeError(
            f"not CONCURRENCY/CLAIM_BATCH: {text!r} (example: 400/200)"
        )
    return int(concurrency), int(claim_batch)


def pattern_option(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({error})") from None


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "suite",
        parents=[common],
        help="fairlane beside the peer harness (PEERS_DIR): one JSON line per step, then a table",
    )
    p.add_argument(
        "--sizes",
        type=sizes_option,
        default=sizes_option(DEFAULT_SIZES),
        help="drain sizes, comma-separated (20000, 20k, 1M); the smallest is also the size of "
        f"the concurrency-10, tenants and enqueue steps (default: {DEFAULT_SIZES})",
    )
    p.add_argument("--quick", action="store_true", help="the smallest size only")
    p.add_argument("--reps", type=positive, default=1, help="repetitions of every step")
    p.add_argument(
        "--best",
        type=best_option,
        default=(BEST_CONCURRENCY, BEST_CLAIM_BATCH),
        metavar="C/B",
        help="fairlane's best setting, --concurrency/--claim-batch "
        f"(default: {BEST_CONCURRENCY}/{BEST_CLAIM_BATCH})",
    )
    p.add_argument("--latency-runs", type=positive, default=300, help="pickups per latency step")
    p.add_argument("--out", help="results file, appended to (default: bench/results/<date>.jsonl)")
    p.add_argument(
        "--peers-dir",
        help="the peer harness (default: $PEERS_DIR); without one only fairlane runs",
    )
    p.add_argument(
        "--step-timeout", type=float, default=600.0, help="seconds before a step is stopped"
    )
    p.add_argument(
        "--only",
        type=pattern_option,
        metavar="REGEX",
        help="only the steps whose label it matches, as the harness's ONLY "
        "(labels: fairlane/drain/best@100k, graphile/throughput/tuned, pgqueuer/latency, ...)",
    )
    p.add_argument("--table", metavar="FILE", help="print the table of a results file; run nothing")
    p.set_defaults(func=main)
