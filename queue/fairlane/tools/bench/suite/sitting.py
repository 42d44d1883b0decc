"""A sitting: every planned step in turn, each one's line appended to the results file.

The file starts with a ``suite`` line (settings, which peers were installed, the machine);
then one line per step, written as soon as the step ends, so an interrupted sitting keeps
what it measured. A step's stderr goes to the file beside it, ``<results>.stderr.log``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from psycopg.conninfo import conninfo_to_dict

from fairlane.tools.bench.suite import peers
from fairlane.tools.bench.suite.plan import Settings, Step, plan
from fairlane.tools.bench.suite.results import INSTALLED, SUITE_LABEL
from fairlane.tools.bench.suite.runner import Launch, run_step
from fairlane.tools.bench.suite.sides import FAIRLANE, PEERS, Side

log = logging.getLogger("fairlane.tools.bench")

Launcher = Callable[[Step], Launch]


@dataclass(frozen=True)
class Sitting:
    settings: Settings
    out: Path
    server: str  # where fairlane's steps make their databases; leftovers are dropped there
    named_server: str | None  # --dsn or DATABASE_URL: the peers are pointed at it too
    fairlane_flags: tuple[str, ...]  # given to every ``fairlane bench`` step
    peers_dir: str | None
    step_timeout: float
    only: re.Pattern[str] | None = None  # the steps whose label it matches; None: all


def run_sitting(sitting: Sitting, environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """Run every step; return the lines written (the ``suite`` line first)."""
    status, launchers = _peers(sitting, environ)
    sides = [FAIRLANE, *(peer for peer in PEERS if status[peer.name] == INSTALLED)]
    for peer in PEERS:
        if status[peer.name] != INSTALLED:
            log.warning(
                "%s: not installed (%s); its column stays empty", peer.title, status[peer.name]
            )
    sitting.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [_suite_line(sitting, status)]
    errors_path = sitting.out.with_name(sitting.out.stem + ".stderr.log")
    with sitting.out.open("a") as out, errors_path.open("a") as errors:
        _write(out, lines[0])
        for step in plan(sitting.settings, sides):
            if sitting.only is not None and not sitting.only.search(step.label):
                continue
            launch = launchers[step.side.name](step)
            line = run_step(
                step, launch, timeout=sitting.step_timeout, server=sitting.server, errors=errors
            )
            _write(out, line)
            lines.append(line)
            log.info("   %s", _brief(step, line))
    return lines


def _peers(
    sitting: Sitting, environ: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, Launcher]]:
    """Each peer's status (installed, or why not), and a launcher per side that can run."""
    launchers: dict[str, Launcher] = {FAIRLANE.name: lambda step: _fairlane_launch(sitting, step)}
    harness = peers.find_harness(sitting.peers_dir, environ)
    if isinstance(harness, str):
        return {peer.name: harness for peer in PEERS}, launchers
    env = peers.environment(harness, environ, sitting.named_server)
    status: dict[str, str] = {}
    for peer in PEERS:
        status[peer.name] = peers.missing(harness, peer, env) or INSTALLED
        launchers[peer.name] = _peer_launcher(harness, peer, env)
    return status, launchers


def _peer_launcher(harness: peers.Harness, peer: Side, env: dict[str, str]) -> Launcher:
    def launch(step: Step) -> Launch:
        return Launch(peers.command(harness, peer, step.argv), harness.directory, env)

    return launch


def _fairlane_launch(sitting: Sitting, step: Step) -> Launch:
    argv = [sys.executable, "-m", "fairlane.cli", "bench", *step.argv[:1]]
    return Launch([*argv, *sitting.fairlane_flags, *step.argv[1:]])


def _suite_line(sitting: Sitting, status: dict[str, str]) -> dict[str, Any]:
    settings = sitting.settings
    server = conninfo_to_dict(sitting.server)
    return {
        "label": SUITE_LABEL,
        "ts": round(time.time(), 3),
        "sizes": list(settings.sizes),
        "reps": settings.reps,
        "best": f"{settings.concurrency}/{settings.claim_batch}",
        "latency_runs": settings.latency_runs,
        "peers": status,
        "fairlane": metadata.version("fairlane"),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load1": round(os.getloadavg()[0], 2),
        "server": f"{server.get('host', '')}:{server.get('port', '')}/{server.get('dbname', '')}",
    }


def _write(out: IO[str], line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


def _brief(step: Step, line: dict[str, Any]) -> str:
    if "error" in line:
        return f"{step.label}: {line['error']}"
    for name in (step.side.rate_field, "runs_per_s", "p50_ms"):
        if name in line:
            return f"{step.label}: {name} {line[name]}"
    return step.label
