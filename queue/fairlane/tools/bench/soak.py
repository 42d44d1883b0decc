"""soak: a sustained rate for minutes, pruning as in production; does the runs table plateau?

A producer triggers ``--rate`` no-op runs a second (a ``trigger_many`` call every
``PRODUCE_EVERY_S``, each run carrying the wall time just before its call), one worker
(``--concurrency``, ``--claim-batch``) drains them and runs the periodic jobs as any worker
does, with ``prune_retention_s`` at ``--retention-s``. Every ``--sample-s`` (a minute) one
JSON line: the runs table's rows, heap and index bytes and dead tuples, and what the window saw
(soak_figures.py); at the end one more line with the verdict (the plateau over the last five
samples, the pickup p99's growth) and whether what a user can still see outlived every
retention window (soak_kept.py). Each line is appended to ``--out`` too.

Without ``--dsn`` the server is an embedded one (pgserver) on a data folder of its own, so
autovacuum runs at PostgreSQL's defaults; its settings are on the last line either way.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg

from fairlane import AsyncClient, RunContext, TaskRegistry, Worker
from fairlane.maintenance import configure_job, set_setting
from fairlane.tools.bench import soak_kept
from fairlane.tools.bench.common import SCHEMA, emit, fresh_database, run_async, server_url
from fairlane.tools.bench.enqueue import TASK, open_client
from fairlane.tools.bench.soak_figures import Window, read_table, sample_line, verdict
from fairlane.triggering.request import TriggerRequest

log = logging.getLogger("fairlane.tools.bench")

PRODUCE_EVERY_S = 0.05
RESULTS_DIR = Path("bench") / "results"
SERVER_SQL = """
SELECT name, setting FROM pg_settings
WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',
               'autovacuum_vacuum_insert_scale_factor', 'server_version')
"""


@dataclass
class Soak:
    window: Window = field(default_factory=Window)
    samples: list[dict[str, Any]] = field(default_factory=list)
    stop: anyio.Event = field(default_factory=anyio.Event)

    def handled(self, payload: Any) -> None:
        self.window.finished += 1
        if isinstance(payload, dict) and "t" in payload:
            self.window.pickups_ms.append((time.time() - payload["t"]) * 1000)


def registry_for(soak: Soak) -> TaskRegistry:
    tasks = TaskRegistry()

    @tasks.task(TASK)
    async def noop(ctx: RunContext, payload: Any) -> None:
        soak.handled(payload)

    soak_kept.add_waiter(tasks)
    return tasks


async def produce(client: AsyncClient, soak: Soak, rate: float) -> None:
    """``rate`` runs a second, caught up at the next call when a call was late."""
    started = time.perf_counter()
    produced = 0
    while not soak.stop.is_set():
        due = int((time.perf_counter() - started) * rate) - produced
        if due > 0:
            sent = time.time()
            await client.trigger_many([TriggerRequest(TASK, {"t": sent}) for _ in range(due)])
            produced += due
            soak.window.produced += due
        with anyio.move_on_after(PRODUCE_EVERY_S):
            await soak.stop.wait()


async def sample(
    probe: psycopg.AsyncConnection[Any], soak: Soak, args: argparse.Namespace, out: Path | None
) -> None:
    """A line every ``--sample-s`` until ``--minutes`` have passed."""
    count = max(1, round(args.minutes * 60 / args.sample_s))
    started = time.perf_counter()
    before = await read_table(probe)
    for number in range(1, count + 1):
        await anyio.sleep(max(0.0, started + number * args.sample_s - time.perf_counter()))
        window, soak.window = soak.window, Window()
        table = await read_table(probe)
        line = sample_line(number, time.perf_counter() - started, table, before, window)
        before = table
        soak.samples.append(line)
        write(line, out)


async def _soak(dsn: str, args: argparse.Namespace, out: Path | None) -> dict[str, Any]:
    soak = Soak()
    worker = Worker(
        registry_for(soak),
        dsn,
        schema=SCHEMA,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        shutdown_grace=5.0,
    )
    probe = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with probe, anyio.create_task_group() as group:
        await group.start(worker.run)
        kept = await soak_kept.place(dsn, probe)
        client = await open_client(dsn)
        async with client:
            group.start_soon(produce, client, soak, args.rate)
            await sample(probe, soak, args, out)
            soak.stop.set()
        found = await soak_kept.check(dsn, probe, kept)
        rows = await (await probe.execute(SERVER_SQL)).fetchall()
        server = {str(name): str(value) for name, value in rows}
        worker.stop()
    return {"samples": soak.samples, "kept": found, "server": server}


def configure(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """The retention, the pruning job's interval and any ``--set`` NAME=VALUE (JSON)."""
    settings: dict[str, Any] = {"prune_retention_s": args.retention_s}
    for assignment in args.set:
        name, _, value = assignment.partition("=")
        settings[name] = json.loads(value)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in settings.items():
            set_setting(conn, name, value, schema=SCHEMA)
        if args.prune_interval_s is not None:
            configure_job(
                conn, "prune_finished_runs", interval_s=args.prune_interval_s, schema=SCHEMA
            )
    return settings


def write(line: dict[str, Any], out: Path | None) -> None:
    emit(line)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as results:
            results.write(json.dumps(line) + "\n")


@contextmanager
def soak_server(dsn: str | None) -> Iterator[str]:
    """``--dsn``, or an embedded server on a fresh data folder, stopped and removed after."""
    if dsn:
        yield server_url(dsn)
        return
    from fairlane.tools.embedded import EmbeddedPostgres

    folder = Path(tempfile.mkdtemp(prefix="fairlane-soak-"))
    try:
        with EmbeddedPostgres(folder / "data") as server:
            yield server.url("postgres")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(args: argparse.Namespace) -> int:
    today = datetime.date.today().isoformat()
    out = None if args.out == "-" else Path(args.out or RESULTS_DIR / f"soak-{today}.jsonl")
    with (
        soak_server(getattr(args, "dsn", None)) as server,
        fresh_database(server, "soak", keep=args.keep_db) as dsn,
    ):
        settings = configure(dsn, args)
        result = run_async(_soak, dsn, args, out, loop=args.loop)
    write(summary(args, settings, result), out)
    return 0


def summary(
    args: argparse.Namespace, settings: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any]:
    samples = result["samples"]
    return {
        "scenario": "soak",
        "rate": args.rate,
        "minutes": args.minutes,
        "sample_s": args.sample_s,
        "retention_s": args.retention_s,
        "settings": settings,
        "server": result["server"],
        "produced": sum(s["produced"] for s in samples),
        "finished": sum(s["finished"] for s in samples),
        **verdict(samples, args.sample_s, args.retention_s),
        **result["kept"],
    }


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "soak",
        parents=[common],
        help="a sustained rate with pruning on: the runs table's size and pickups each minute",
    )
    p.add_argument("--rate", type=float, default=2000.0, help="runs triggered a second")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--retention-s", type=float, default=60.0, help="prune_retention_s")
    p.add_argument("--sample-s", type=float, default=60.0, help="seconds between lines")
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--claim-batch", type=int, default=100)
    p.add_argument(
        "--prune-interval-s",
        type=float,
        help="prune_finished_runs's interval (default: the job's own, 10 s)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an engine setting for the run, its value JSON (repeatable)",
    )
    p.add_argument(
        "--out",
        help="results file, appended to (default: bench/results/soak-<date>.jsonl; - for none)",
    )
    p.set_defaults(func=main)
