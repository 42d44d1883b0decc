"""``fairlane demo``: a small multi-tenant workload run end to end, with live progress.

It picks a database (``--dsn`` or ``DATABASE_URL``; else the local server at the default address
if one answers; else an embedded PostgreSQL in ``.pgdata/``, see ``fairlane.tools.embedded``),
migrates it, starts a worker and triggers a few hundred runs in each of three environments, in
waves, through the same statement an application uses. Two tasks: ``thumbnail`` (async) and
``send_email`` (sync, so it runs in a worker thread). About one run in ten fails on its first
attempt and is retried after a short backoff; a few ``send_email`` runs always fail and end
FAILED once their attempts are spent. A progress line shows runs finished per environment and
runs per status; a summary follows, and the exit status says whether every run ended as
expected.

The demo keeps to its own schema (``fairlane_demo`` unless ``--schema`` or ``FAIRLANE_SCHEMA``
says otherwise) and its worker claims only from the demo's environments, so a demo on a shared
database neither sees nor disturbs other runs. The registry is ``fairlane.tools.demo:tasks``:
``FAIRLANE_SCHEMA=fairlane_demo fairlane worker fairlane.tools.demo:tasks`` runs the same
handlers.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import anyio
import psycopg
from psycopg import sql
from sqlalchemy.exc import DBAPIError

from fairlane.async_client import AsyncClient
from fairlane.config import psycopg_dsn, schema_name
from fairlane.errors import FairlaneError
from fairlane.models import FINAL_STATUSES, RunStatus
from fairlane.retry import Backoff
from fairlane.schema import migrate
from fairlane.tools.embedded import choose_database
from fairlane.triggering.request import TriggerRequest
from fairlane.worker import RunContext, TaskRegistry, Worker

ENVIRONMENTS = ("demo-acme", "demo-globex", "demo-initech")
# Its own schema unless told otherwise: on a shared database, workers of other applications
# (which claim from every environment of their schema) never see the demo's runs.
DEMO_SCHEMA = "fairlane_demo"
FLAKY_SHARE = 0.1
POISON_EVERY = 150  # one send_email run in this many always fails
QUICK_RETRY = Backoff(min_s=0.2, max_s=1.0)
MAX_ATTEMPTS = 3

tasks = TaskRegistry()


class TransientError(Exception):
    """A failure that the next attempt does not repeat."""


class PermanentError(Exception):
    """A failure that every attempt repeats."""


@tasks.task("thumbnail", backoff=QUICK_RETRY)
async def thumbnail(ctx: RunContext, payload: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(payload["work_ms"] / 1000)
    if payload.get("flaky") and ctx.attempt == 1:
        raise TransientError("image store timed out")
    return {"image": payload["image"], "size": [128, 128]}


@tasks.task("send_email", backoff=QUICK_RETRY)
def send_email(ctx: RunContext, payload: dict[str, Any]) -> dict[str, Any]:
    time.sleep(payload["work_ms"] / 1000)
    if payload.get("poison"):
        raise PermanentError(f"mailbox {payload['to']} does not exist")
    if payload.get("flaky") and ctx.attempt == 1:
        raise TransientError("SMTP server busy, try again")
    return {"sent_to": payload["to"]}


@dataclass(frozen=True, slots=True)
class Workload:
    requests: list[TriggerRequest]
    flaky: int
    poison: int


def build_workload(
    environments: Sequence[str], runs_per_environment: int, *, seed: int = 7
) -> Workload:
    """Interleaved across environments, as arrivals from several tenants would be."""
    rng = random.Random(seed)
    requests: list[TriggerRequest] = []
    flaky = poison = 0
    for n in range(runs_per_environment):
        for environment in environments:
            work_ms = rng.randint(20, 120)
            is_flaky = rng.random() < FLAKY_SHARE
            if n % 2 == 0:
                payload: dict[str, Any] = {"image": n, "work_ms": work_ms, "flaky": is_flaky}
                task = "thumbnail"
            else:
                is_poison = n % POISON_EVERY == 1
                poison += is_poison
                is_flaky = is_flaky and not is_poison
                payload = {
                    "to": f"user{n}@{environment}.example",
                    "work_ms": work_ms,
                    "flaky": is_flaky,
                    "poison": is_poison,
                }
                task = "send_email"
            flaky += is_flaky
            request = TriggerRequest(
                task, payload, environment=environment, max_attempts=MAX_ATTEMPTS, tags=("demo",)
            )
            requests.append(request)
    return Workload(requests, flaky, poison)


# -- progress --------------------------------------------------------------------------


class Tally(NamedTuple):
    runs: int
    attempts: int
    retries: int  # attempts beyond each run's first


Counts = dict[tuple[str, str], Tally]  # (environment, status) -> tally


async def fetch_counts(
    conn: psycopg.AsyncConnection[Any], schema: str, run_ids: Sequence[int]
) -> Counts:
    statement = sql.SQL(
        "SELECT environment, status, count(*), sum(attempts), sum(greatest(attempts - 1, 0)) "
        "FROM {}.runs WHERE id = ANY(%s) GROUP BY environment, status"
    ).format(sql.Identifier(schema))
    cursor = await conn.execute(statement, (list(run_ids),))
    return {
        (env, status): Tally(int(n), int(attempts), int(retries))
        for env, status, n, attempts, retries in await cursor.fetchall()
    }


async def count_unfinished(
    conn: psycopg.AsyncConnection[Any], schema: str, environments: Sequence[str]
) -> int:
    statement = sql.SQL(
        "SELECT count(*) FROM {}.runs WHERE environment = ANY(%s) AND status = ANY(%s)"
    ).format(sql.Identifier(schema))
    unfinished = [status.value for status in RunStatus if not status.is_final]
    cursor = await conn.execute(statement, (list(environments), unfinished))
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


FINAL = frozenset(status.value for status in FINAL_STATUSES)
STATUS_ORDER = [status.value for status in RunStatus]
# Short names, so that the progress line fits 80 columns with three environments.
STATUS_SHORT = {
    "DELAYED": "wait",
    "QUEUED": "q",
    "EXECUTING": "run",
    "WAITING": "wait",
    "COMPLETED": "ok",
    "FAILED": "fail",
    "CRASHED": "crash",
    "TIMED_OUT": "tmo",
    "EXPIRED": "exp",
    "CANCELED": "cxl",
    "SYSTEM_FAILURE": "sys",
}
LINE_WIDTH = 79


def fit(text: str, width: int) -> str:
    """``text`` within ``width`` columns, cut between words (never inside a number), with an
    ellipsis where it was cut."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width)
    return (text[:cut] if cut > 0 else text[: width - 1]).rstrip(" |") + "\u2026"


def status_totals(counts: Counts) -> Counter[str]:
    totals: Counter[str] = Counter()
    for (_env, status), tally in counts.items():
        totals[status] += tally.runs
    return totals


def finished(counts: Counts, environment: str | None = None) -> int:
    return sum(
        tally.runs
        for (env, status), tally in counts.items()
        if status in FINAL and environment in (None, env)
    )


class Progress:
    """One line, rewritten in place on a terminal; a line a second anywhere else."""

    def __init__(self, out: TextIO, environments: Sequence[str], per_environment: int) -> None:
        self.out = out
        self.environments = environments
        self.per_environment = per_environment
        self.live = out.isatty()
        self._last_print = 0.0

    def line(self, counts: Counts, elapsed: float) -> str:
        done = [
            f"{env.removeprefix('demo-')[:7]} {finished(counts, env)}/{self.per_environment}"
            for env in self.environments
        ]
        totals = status_totals(counts)
        merged: Counter[str] = Counter()
        for status in STATUS_ORDER:
            merged[STATUS_SHORT[status]] += totals[status]
        statuses = [f"{name} {count}" for name, count in merged.items() if count]
        rate = finished(counts) / elapsed if elapsed > 0 else 0.0
        text = f"{elapsed:5.1f}s {rate:.0f}/s | {' '.join(done)} | {' '.join(statuses)}"
        return fit(text, LINE_WIDTH)

    def show(self, counts: Counts, elapsed: float, *, force: bool = False) -> None:
        text = self.line(counts, elapsed)
        if self.live:
            width = min(shutil.get_terminal_size((80, 20)).columns - 1, LINE_WIDTH)
            self.out.write("\r\x1b[K" + fit(text, width))
            self.out.flush()
        elif force or time.monotonic() - self._last_print >= 1.0:
            self._last_print = time.monotonic()
            print(text, file=self.out, flush=True)

    def done(self) -> None:
        if self.live:
            self.out.write("\n")
            self.out.flush()


def fairlane_command() -> str:
    """How to run ``fairlane`` from the shell the demo was started in: the script beside this
    interpreter when it is not on PATH (a virtualenv that is not activated)."""
    beside = Path(sys.executable).parent / "fairlane"
    on_path = shutil.which("fairlane")
    if beside.exists() and (on_path is None or Path(on_path).resolve() != beside.resolve()):
        try:
            return str(beside.relative_to(Path.cwd()))
        except ValueError:
            return str(beside)
    return "fairlane"


# -- the run ---------------------------------------------------------------------------


@dataclass(slots=True)
class DemoResult:
    counts: Counts = field(default_factory=dict)
    elapsed: float = 0.0
    run_ids: list[int] = field(default_factory=list)
    worker_stats: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    timed_out: bool = False


async def run_demo(
    url: str,
    *,
    schema: str = DEMO_SCHEMA,
    environments: Sequence[str] = ENVIRONMENTS,
    runs_per_environment: int = 300,
    concurrency: int = 10,
    waves: int = 6,
    give_up_after: float = 50.0,
    seed: int = 7,
    out: TextIO = sys.stdout,
) -> tuple[Workload, DemoResult]:
    """Trigger the workload in waves, run a worker until every run is final, count them."""
    schema = schema_name(schema)
    workload = build_workload(environments, runs_per_environment, seed=seed)
    result = DemoResult()
    progress = Progress(out, environments, runs_per_environment)
    worker = Worker(
        tasks,
        url,
        schema=schema,
        concurrency=concurrency,
        environments=environments,
        shutdown_grace=5.0,
    )
    dsn = psycopg_dsn(url)
    signals_scope = anyio.CancelScope()

    async def on_signals() -> None:
        with signals_scope, anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _signum in signals:
                result.interrupted = True
                return

    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as monitor,
        AsyncClient(dsn, schema=schema) as client,
        anyio.create_task_group() as group,
    ):
        leftover = await count_unfinished(monitor, schema, environments)
        if leftover:
            print(
                f"note      {leftover} unfinished runs of an earlier demo are in these "
                "environments; the worker takes them too",
                file=out,
                flush=True,
            )
        await group.start(worker.run)
        group.start_soon(on_signals)
        started = time.monotonic()
        wave_size = -(-len(workload.requests) // waves)
        pending = [
            workload.requests[start : start + wave_size]
            for start in range(0, len(workload.requests), wave_size)
        ]
        while not result.interrupted:
            if pending:
                result.run_ids += await client.trigger_many(pending.pop(0))
            counts = await fetch_counts(monitor, schema, result.run_ids)
            elapsed = time.monotonic() - started
            progress.show(counts, elapsed)
            if not pending and finished(counts) == len(result.run_ids):
                break
            if elapsed > give_up_after:
                result.timed_out = True
                break
            await anyio.sleep(0.25 if pending else 0.1)
        result.elapsed = time.monotonic() - started
        # A graceful stop: running handlers finish (or are handed back), outcomes are flushed.
        worker.stop()
        signals_scope.cancel()
    result.counts = await _final_counts(dsn, schema, result.run_ids)
    progress.show(result.counts, result.elapsed, force=True)
    progress.done()
    result.worker_stats = worker.stats.as_dict()
    return workload, result


async def _final_counts(dsn: str, schema: str, run_ids: Sequence[int]) -> Counts:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await fetch_counts(conn, schema, run_ids)


# -- the summary -----------------------------------------------------------------------


def summary(result: DemoResult, environments: Sequence[str]) -> list[str]:
    totals = status_totals(result.counts)
    shown = [status for status in STATUS_ORDER if totals[status]]
    header = f"{'environment':<16}{'runs':>6}" + "".join(f"{s:>11}" for s in shown)
    lines = [header + f"{'attempts':>10}{'retries':>9}"]
    for env in [*environments, "total"]:
        by_status: Counter[str] = Counter()
        attempts = retries = 0
        for (e, status), tally in result.counts.items():
            if env in (e, "total"):
                by_status[status] += tally.runs
                attempts += tally.attempts
                retries += tally.retries
        runs = sum(by_status.values())
        cells = "".join(f"{by_status[status]:>11}" for status in shown)
        lines.append(f"{env:<16}{runs:>6}{cells}{attempts:>10}{retries:>9}")
    done = finished(result.counts)
    rate = done / result.elapsed if result.elapsed else 0.0
    lines.append(
        f"{done} of {len(result.run_ids)} runs final in {result.elapsed:.1f}s: {rate:.0f} runs/s"
    )
    stats = result.worker_stats
    per_claim = stats.get("claimed", 0) / max(1, stats.get("claims", 0))
    lines.append(
        f"worker: {stats.get('claims', 0)} claims took {stats.get('claimed', 0)} runs "
        f"({per_claim:.1f} per claim); {stats.get('completed', 0)} completed, "
        f"{stats.get('retried', 0)} retried, {stats.get('failed', 0)} failed, "
        f"{stats.get('stale_writes', 0)} writes refused by the fence, "
        f"{stats.get('wakeups', 0)} wakeups"
    )
    return lines


def verdict(workload: Workload, result: DemoResult) -> str | None:
    """None when every run ended as designed, else what went wrong."""
    if result.interrupted:
        return "interrupted"
    totals = status_totals(result.counts)
    expected = Counter(
        {"COMPLETED": len(workload.requests) - workload.poison, "FAILED": workload.poison}
    )
    if totals == +expected:
        return None
    if result.timed_out:
        return f"timed out with runs unfinished: {dict(totals)}"
    return f"expected {dict(+expected)}, got {dict(totals)}"


# -- the command -----------------------------------------------------------------------


def _safe(url: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _database_error(error: BaseException) -> BaseException | None:
    """The database or configuration error in ``error`` (perhaps inside a group), if any."""
    if isinstance(error, psycopg.Error | DBAPIError | FairlaneError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _database_error(inner)
            if found is not None:
                return found
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    if not args.verbose:
        for name in ("fairlane.worker", "alembic", "pgserver"):
            logging.getLogger(name).setLevel(logging.WARNING)
    environments = ENVIRONMENTS[: args.environments]
    schema = schema_name(args.schema or os.environ.get("FAIRLANE_SCHEMA") or DEMO_SCHEMA)
    out = sys.stdout
    try:
        choice = choose_database(args.dsn, embedded=True if args.embedded else None)
    except (FairlaneError, OSError, subprocess.SubprocessError) as error:
        print(f"error: the embedded PostgreSQL did not start: {error}", file=sys.stderr)
        return 2
    try:
        if choice.embedded is not None:
            where = f"embedded PostgreSQL in {choice.embedded.data_dir} (pgserver)"
        else:
            where = f"{_safe(choice.url)} ({choice.source})"
        print(f"database  {where}", file=out)
        migrate.upgrade(choice.url, schema)
        revision = migrate.current_revision(choice.url, schema)
        with psycopg.connect(psycopg_dsn(choice.url)) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        server = f"PostgreSQL {version[0] if version else '?'}"
        print(f"schema    {schema}, migrated to revision {revision} on {server}", file=out)
        print(
            f"workload  {args.runs * len(environments)} runs in {len(environments)} environments"
            f" ({', '.join(environments)})\n          tasks thumbnail (async) and send_email"
            f" (sync); about {FLAKY_SHARE:.0%} fail once and are retried, a few always fail",
            file=out,
        )
        print(
            f"worker    concurrency {args.concurrency}, claims of up to {args.concurrency} runs,"
            " woken by LISTEN/NOTIFY, polling every second as a fallback",
            file=out,
            flush=True,
        )
        workload, result = anyio.run(
            lambda: run_demo(
                choice.url,
                schema=schema,
                environments=environments,
                runs_per_environment=args.runs,
                concurrency=args.concurrency,
                give_up_after=args.timeout,
                out=out,
            )
        )
    except Exception as raised:
        failure = _database_error(raised)
        if failure is None:
            raise
        print(f"error: {failure}".rstrip(), file=sys.stderr)
        if choice.source == "local server":
            print(
                "hint: set DATABASE_URL, or FAIRLANE_EMBEDDED=1 for the embedded server",
                file=sys.stderr,
            )
        return 2
    finally:
        if choice.embedded is not None:
            choice.embedded.stop()
    for line in summary(result, environments):
        print(line, file=out)
    problem = verdict(workload, result)
    if problem:
        print(f"demo: {problem}", file=out)
        return 130 if result.interrupted else 1
    print(
        f"every run ended as designed: {workload.poison} FAILED on purpose after "
        f"{MAX_ATTEMPTS} attempts, the rest COMPLETED ({workload.flaky} of them on a retry)",
        file=out,
    )
    if choice.embedded is None:
        command = fairlane_command()
        print(
            f"look around: FAIRLANE_SCHEMA={schema} {command} status\n"
            f"         or: FAIRLANE_SCHEMA={schema} {command} runs list --status FAILED\n"
            "(with the same DATABASE_URL)",
            file=out,
        )
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run a small multi-tenant workload with live progress",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="database URL (default: $DATABASE_URL, the local server, or the embedded one)",
    )
    p.add_argument(
        "--schema",
        default=argparse.SUPPRESS,
        help=f"schema of the demo's tables (default: $FAIRLANE_SCHEMA or {DEMO_SCHEMA})",
    )
    p.add_argument(
        "--embedded",
        action="store_true",
        help="use the embedded PostgreSQL (pgserver) even if another server answers; "
        "same as FAIRLANE_EMBEDDED=1",
    )
    p.add_argument("--runs", type=int, default=300, help="runs per environment (default 300)")
    p.add_argument(
        "--environments",
        type=int,
        default=len(ENVIRONMENTS),
        choices=range(1, 4),
        help="how many environments (1-3, default 3)",
    )
    p.add_argument("--concurrency", type=int, default=10, help="worker concurrency (default 10)")
    p.add_argument("--timeout", type=float, default=50.0, help="give up after this many seconds")
    p.set_defaults(func=cmd_demo)
