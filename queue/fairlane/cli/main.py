"""The ``fairlane`` command: migrate, worker, trigger, status, runs, limits, maintenance,
workers, batches, keys, serve, bench, demo."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import anyio
import psycopg

from fairlane.cli import logs
from fairlane.cli.common import (
    Parser,
    connection_options,
    global_options_everywhere,
    json_option,
    print_json,
)
from fairlane.cli.served import unserved_note
from fairlane.cli.workers import print_unserved, unserved_json
from fairlane.client import Client
from fairlane.config import schema_name
from fairlane.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_PREPARE_THRESHOLD,
    DEFAULT_STATEMENT_TIMEOUT,
    check_prepare_threshold,
    connect_failure,
    unavailable,
)
from fairlane.errors import ConfigurationError, FairlaneError, PayloadError, UnservedTaskError
from fairlane.errors_policy import exit_code
from fairlane.schema import migrate
from fairlane.schema.check import SCHEMA_REVISION, connect_checked
from fairlane.worker import TaskRegistry, Worker
from fairlane.worker.process import LOOP_CHOICES, settle_heap, use_uvloop
from fairlane.worker.registry import import_registry

Command = Callable[[argparse.Namespace], int]


def _common(parser: argparse.ArgumentParser) -> None:
    connection_options(parser)


def cmd_migrate(args: argparse.Namespace) -> int:
    if args.downgrade:
        migrate.downgrade(args.dsn, args.schema, args.revision or migrate.BASE)
        installed = None
    else:
        installed = migrate.upgrade(args.dsn, args.schema, args.revision or migrate.HEAD)
    print(
        f"schema {schema_name(args.schema)} at revision "
        f"{migrate.current_revision(args.dsn, args.schema)}"
    )
    if installed is not None:
        print(
            f"SQL objects: {len(installed.created)} created, {len(installed.replaced)} "
            f"replaced, {len(installed.dropped)} dropped, {installed.unchanged} unchanged"
        )
    return 0


def load_registry(spec: str) -> TaskRegistry:
    """``package.module:attribute`` naming a TaskRegistry, importable from the current folder."""
    # A console script's sys.path starts with its own bin folder, not the working directory;
    # `fairlane worker app.tasks:tasks` run in a project should find the project's modules.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return import_registry(spec)


async def _run_worker(worker: Worker, burst: bool = False) -> None:
    refused: FairlaneError | None = None
    async with anyio.create_task_group() as group:

        async def on_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                received = 0
                async for signum in signals:
                    received += 1
                    logging.getLogger("fairlane.worker").info(
                        "received %s: shutting down (again to skip the grace period)",
                        signal.Signals(signum).name,
                    )
                    worker.stop(skip_grace=received > 1)

        group.start_soon(on_signals)
        try:
            await (worker.run_until_idle() if burst else worker.run())
        except FairlaneError as error:
            # Raised outside the task group, so main() sees it as itself, not in a group.
            refused = error
        group.cancel_scope.cancel()
    if refused is not None:
        raise refused


def cmd_worker(args: argparse.Namespace) -> int:
    worker = Worker(
        load_registry(args.tasks),
        args.dsn,
        schema=args.schema,
        concurrency=args.concurrency,
        claim_batch=args.claim_batch,
        lease_seconds=args.lease_seconds,
        poll_interval=args.poll_interval,
        listen=not args.no_listen,
        shutdown_grace=args.shutdown_grace,
        environments=args.environment or None,
        queues=args.queue or None,
        batch_connections=args.batch_connections,
        connect_timeout=args.connect_timeout,
        statement_timeout=args.statement_timeout,
        prepare_threshold=args.prepare_threshold,
        durable_claims=not args.fast_claims,
        wait_in_memory_s=args.wait_in_memory,
    )
    if args.metrics_port is not None:
        from fairlane.metrics import serve_worker_metrics

        serve_worker_metrics(args.metrics_port, worker.metrics, args.dsn, schema=args.schema)
    uvloop = use_uvloop(args.loop)
    settle_heap()
    anyio.run(_run_worker, worker, args.burst, backend_options={"use_uvloop": uvloop})
    if args.json:
        # The last line logged says the same; this is for a script to read.
        print(json.dumps(worker.stats.as_dict()))
    return 0


def _prepare_threshold(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        return check_prepare_threshold(int(text))
    except (ValueError, ConfigurationError):
        raise argparse.ArgumentTypeError(
            f"expected 'none' or an integer >= 0, not {text!r}"
        ) from None


def _json_argument(what: str, text: str | None) -> Any:
    """A JSON command-line argument, or PayloadError saying why it is not one (the command
    then prints one line and exits 2, like any refused trigger)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise PayloadError(f"{what} is not valid JSON: {error}") from None
    except RecursionError:
        raise PayloadError(f"{what} nests arrays and objects too deeply") from None


def cmd_trigger(args: argparse.Namespace) -> int:
    payload = _json_argument("payload", args.payload)
    metadata = _json_argument("--metadata", args.metadata)
    with Client(args.dsn, schema=args.schema) as client:
        served = client.workers.serves(args.task, environment=args.environment, queue=args.queue)
        unserved = None
        if not served:
            unserved = unserved_note(client.workers.list(), args.task, args.environment, args.queue)
        if unserved is not None and args.strict:
            raise UnservedTaskError(args.task, f"{unserved}: nothing triggered (--strict)")
        run_id = client.trigger(
            args.task,
            payload,
            environment=args.environment,
            queue=args.queue,
            priority=args.priority,
            max_attempts=args.max_attempts,
            delay=args.delay,
            ttl=args.ttl,
            max_duration=args.max_duration,
            tags=args.tag,
            metadata=metadata,
            machine=args.machine,
            idempotency_key=args.idempotency_key,
        )
    if unserved is not None:
        print(f"warning: {unserved}; run {run_id} waits QUEUED until one does", file=sys.stderr)
    print(run_id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with Client(args.dsn, schema=args.schema) as client:
        counts = client.count_by_status()
        unserved = client.workers.unserved()
    if args.json:
        # The counts by status as before, and the unserved tasks under a key of their own.
        print_json({**counts, "unserved_tasks": unserved_json(unserved)})
        return 0
    print(f"{'status':<16}{'runs':>10}")
    for status, count in counts.items():
        print(f"{status:<16}{count:>10}")
    if unserved:
        print()
        print_unserved(unserved)
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from fairlane.metrics import database_text

    with connect_checked(args.dsn, args.schema):
        pass  # the schema check: a database that is not migrated exits 4, not with a traceback
    print(database_text(args.dsn, schema=args.schema), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fairlane", description=__doc__)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log at debug level, and show the traceback of an unexpected error",
    )
    parser.add_argument("--version", action="version", version=f"fairlane {_version()}")
    parser.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="least severe records logged",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines, or one JSON object per line with the records' structured fields",
    )
    parser.add_argument("--json", action="store_true", help="read commands print JSON")
    parser.add_argument("--dsn", help="database URL (default: $DATABASE_URL)")
    parser.add_argument("--schema", help="fairlane's schema (default: $FAIRLANE_SCHEMA)")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser(
        "migrate",
        help="bring the database to this fairlane's schema (tables, then SQL functions)",
    )
    _common(p)
    p.add_argument(
        "--revision", help="stop at this revision (default: head, which installs the functions)"
    )
    p.add_argument(
        "--downgrade",
        action="store_true",
        help="drop every fairlane table and function in the schema (forward-only otherwise)",
    )
    p.set_defaults(func=cmd_migrate)

    p = commands.add_parser("worker", help="run a worker")
    _common(p)
    p.add_argument("tasks", help="module:attribute of a TaskRegistry")
    p.add_argument(
        "--concurrency",
        type=int,
        default=10,
        help="handlers running at once (waiting ones not counted)",
    )
    p.add_argument(
        "--claim-batch", type=int, help="most runs one claim takes (default: the concurrency)"
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=30.0,
        help="how long a claim holds a run without a heartbeat",
    )
    p.add_argument(
        "--wait-in-memory",
        type=float,
        default=2.0,
        help="seconds a waiting handler is kept before its run lets go of the worker",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="seconds to wait for a notification after a short claim",
    )
    p.add_argument(
        "--no-listen", action="store_true", help="poll only (PgBouncer transaction mode)"
    )
    p.add_argument(
        "--fast-claims",
        action="store_true",
        help="commit claims without waiting for the WAL flush: faster, but a run claimed just "
        "before a server crash runs twice",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        help="seconds running handlers get to finish at shutdown",
    )
    p.add_argument(
        "--burst",
        action="store_true",
        help="drain what is due, then exit (Worker.run_until_idle)",
    )
    p.add_argument(
        "--batch-connections",
        type=int,
        default=4,
        help="most connections the worker's batch carriers hold at once",
    )
    p.add_argument(
        "--environment",
        action="append",
        help="claim only from this environment (repeat for several; default: all)",
    )
    p.add_argument(
        "--loop",
        choices=LOOP_CHOICES,
        default="auto",
        help="event loop: auto takes uvloop when installed (the uvloop extra)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics at http://0.0.0.0:PORT/metrics (default: off)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        help="seconds to open a connection (libpq counts whole seconds, at least 2; default:"
        f" the DSN's connect_timeout, else {DEFAULT_CONNECT_TIMEOUT:g})",
    )
    p.add_argument(
        "--statement-timeout",
        type=float,
        default=DEFAULT_STATEMENT_TIMEOUT,
        help="seconds any statement of the worker may take (heartbeats: less)",
    )
    p.add_argument(
        "--prepare-threshold",
        type=_prepare_threshold,
        default=DEFAULT_PREPARE_THRESHOLD,
        metavar="N|none",
        help="runs of a statement on a connection before it is prepared; 'none': never "
        "(PgBouncer in transaction mode before 1.21)",
    )
    p.add_argument(
        "--queue",
        action="append",
        help="claim only from these queues (and batch carriers, which any worker processes)",
    )
    p.set_defaults(func=cmd_worker)

    p = commands.add_parser("trigger", help="trigger one run")
    _common(p)
    p.add_argument("task", help="the task's registered name")
    p.add_argument("payload", nargs="?", help="JSON payload")
    p.add_argument("--environment", default="default", help="the run's environment")
    p.add_argument("--queue", default="default", help="the run's queue")
    p.add_argument("--priority", type=int, default=0, help="higher starts first")
    p.add_argument("--max-attempts", type=int, help="attempts before the run fails (default 3)")
    p.add_argument("--delay", help="seconds or a duration such as 90s, 5m, 2h30m")
    p.add_argument("--ttl", help="expire if still queued after this long")
    p.add_argument("--max-duration", help="time the handler out after this long")
    p.add_argument("--tag", action="append", help="a tag (repeat for several)")
    p.add_argument("--metadata", help="a JSON object stored with the run")
    p.add_argument("--machine", help="a machine preset name, passed to the handler")
    p.add_argument("--idempotency-key", help="a second trigger with this key returns the run")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a task no live worker serves in the environment and queue (exit 2); "
        "without it, a warning",
    )
    p.set_defaults(func=cmd_trigger)

    p = commands.add_parser("status", help="runs per status, and tasks no live worker serves")
    _common(p)
    json_option(p)
    p.set_defaults(func=cmd_status)

    p = commands.add_parser("metrics", help="print the database-side Prometheus series once")
    _common(p)
    p.set_defaults(func=cmd_metrics)

    for module in (
        "fairlane.cli.runs",
        "fairlane.cli.tokens",
        "fairlane.cli.limits",
        "fairlane.cli.schedules",
        "fairlane.cli.maintenance",
        "fairlane.cli.workers",
        "fairlane.cli.batches",
        "fairlane.cli.bench",
        "fairlane.cli.keys",
        "fairlane.cli.serve",
        "fairlane.tools.demo",
    ):
        try:
            importlib.import_module(module).add_parser(commands)
        except ModuleNotFoundError as missing:
            if not (missing.name and module.startswith(missing.name)):
                raise
    global_options_everywhere(parser)
    return parser


def _version() -> str:
    try:
        return metadata.version("fairlane")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure("debug" if args.verbose else args.log_level, args.log_format)
    before = getattr(args, "before", None)
    if before is not None:
        before(args)
    try:
        return int(args.func(args))
    except psycopg.Error as error:
        # A command on a plain connection (runs, limits, ...) met an outage, a refused login
        # or a database that is not there: classified like the clients' errors.
        failure = unavailable(error, sent=True) or connect_failure(error, SCHEMA_REVISION)
        return _refused(failure or error, args.verbose)
    except BrokenPipeError:
        # The reader went away (`fairlane runs list | head`): stop as a command killed by
        # SIGPIPE would, without a message, and without Python's own at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except (FairlaneError, OSError) as error:
        return _refused(error, args.verbose)


def _refused(error: BaseException, verbose: bool) -> int:
    """One line, no traceback (-v logs it): what went wrong is the message."""
    if verbose:
        logging.getLogger("fairlane").error("command failed", exc_info=error)
    message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    print(f"error: {message}", file=sys.stderr)
    return exit_code(error)


if __name__ == "__main__":
    sys.exit(main())
