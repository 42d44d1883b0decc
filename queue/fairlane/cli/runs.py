"""``fairlane runs``: show, list, cancel, retry and reschedule runs."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from fairlane.cli import run_view
from fairlane.cli.common import connection_options, json_option, print_json
from fairlane.client import Client
from fairlane.control import RunFilter
from fairlane.errors import ConfigurationError
from fairlane.models import Run, RunStatus


def _client(args: argparse.Namespace) -> Client:
    return Client(args.dsn, schema=args.schema)


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        run = client.get_run(args.run_id)
        # Children (RUN), times (DATETIME), tokens (MANUAL) and batches (BATCH), by the
        # handler's call position.
        waits = client.waits_on(run.id) if run.status is RunStatus.WAITING else []
        steps = client.steps(run.id)
    if not args.json:
        print(run_view.render(run, waits, steps), end="")
        return 0
    document = _document(run)
    if run.status is RunStatus.WAITING:
        document["waits_on"] = [asdict(wait) for wait in waits]
    document["steps"] = [asdict(step) for step in steps]
    print(json.dumps(document, default=str, indent=2))
    return 0


def _when(run: Run) -> str:
    moment = run.finished_at or run.started_at or run.created_at
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def _error(run: Run) -> str:
    if not run.error:
        return ""
    message = str(run.error.get("message") or run.error.get("code") or "").strip()
    first = message.splitlines()[0] if message else ""
    return first if len(first) <= 60 else first[:57] + "..."


HEADER = (
    f"{'id':>10} {'status':<15} {'environment':<14} {'queue':<14} {'task':<24} "
    f"{'attempts':<9} {'last change':<19}  error"
)


def _line(run: Run) -> str:
    tags = f"  [{', '.join(run.tags)}]" if run.tags else ""
    return (
        f"{run.id:>10} {run.status:<15} {run.environment:<14} {run.queue:<14} {run.task:<24} "
        f"{f'{run.attempts}/{run.max_attempts}':<9} {_when(run):<19}  {_error(run)}{tags}"
    )


def _document(run: Run) -> dict[str, Any]:
    return asdict(run)


def cmd_list(args: argparse.Namespace) -> int:
    filters = RunFilter(
        environment=args.environment,
        queue=args.queue,
        task=args.task,
        status=args.status,
        tags=args.tag or (),
        limit=args.limit,
        before_id=args.before,
        include_carriers=args.include_carriers,
        batch_id=args.batch,
    )
    with _client(args) as client:
        runs = client.list_runs(filters)
    if args.json:
        print_json([_document(run) for run in runs])
        return 0
    print(HEADER)
    for run in runs:
        print(_line(run))
    return 0


def _bulk_filter(args: argparse.Namespace) -> RunFilter:
    filters = RunFilter(
        environment=args.environment,
        queue=args.queue,
        task=args.task,
        status=args.status,
        tags=args.tag or (),
        since=args.since,
        batch_id=args.batch,
    )
    if filters.is_empty and not args.all:
        raise ConfigurationError("give a run id, a filter, or --all for every run")
    return filters


def _bulk(args: argparse.Namespace, verb: str) -> int:
    filters = _bulk_filter(args)
    with _client(args) as client:
        if args.dry_run:
            print(f"{client.count_matching(filters)} runs match; nothing {verb}")
            return 0
        act = client.retry_many if verb == "retried" else client.cancel_many
        result = act(filters, all=args.all)
    skipped = ", ".join(f"{count} {why}" for why, count in sorted(result.unchanged.items()))
    print(
        f"{result.changed} of {result.matched} matching runs {verb}"
        + (f"; left alone: {skipped}" if skipped else "")
    )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    if args.run_id is None:
        return _bulk(args, "canceled")
    with _client(args) as client:
        result = client.cancel(args.run_id)
    if result.already_final:
        print(f"run {result.run_id} had already ended {result.status}: nothing to cancel")
    else:
        print(
            f"run {result.run_id} canceled (was {result.previous_status}); "
            f"{result.descendants_canceled} descendant runs canceled"
        )
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    if args.run_id is None:
        return _bulk(args, "retried")
    with _client(args) as client:
        run = client.retry(args.run_id)
    print(f"run {run.id} requeued for attempt {run.attempts + 1} of {run.max_attempts}")
    return 0


def cmd_reschedule(args: argparse.Namespace) -> int:
    with _client(args) as client:
        run = client.reschedule(args.run_id, args.delay)
    print(f"run {run.id} starts at {run.available_at}")
    return 0


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--environment", help="runs of this environment")
    parser.add_argument("--queue", help="runs of this queue")
    parser.add_argument("--task", help="runs of this task")
    parser.add_argument(
        "--status",
        action="append",
        type=str.upper,
        choices=[status.value for status in RunStatus],
        help="a status, any case (repeat for several)",
    )
    parser.add_argument(
        "--tag", action="append", help="runs carrying this tag (repeat: all of them)"
    )
    parser.add_argument("--batch", type=int, help="the runs this batch's items made")


def _bulk_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", type=int, nargs="?", help="one run; or filter with the options")
    _filters(parser)
    parser.add_argument("--since", help="runs created within this long (90s, 2h, 1d, ...)")
    parser.add_argument("--all", action="store_true", help="every run, when no filter is given")
    parser.add_argument("--dry-run", action="store_true", help="print how many runs match")


def add_parser(commands: Any) -> None:
    runs = commands.add_parser("runs", help="show, list, cancel, retry, reschedule runs")
    actions = runs.add_subparsers(dest="runs", required=True)

    def action(name: str, help: str, func: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help)
        connection_options(parser)
        parser.set_defaults(func=func)
        return parser

    p = action("show", "one run, whole: state, times, payload, result, attempt errors", cmd_show)
    p.add_argument("run_id", type=int)
    json_option(p)
    p = action("list", "runs, newest first, filtered", cmd_list)
    _filters(p)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--before", type=int, help="only runs with a smaller id (paging)")
    p.add_argument(
        "--include-carriers",
        action="store_true",
        help="list batch carrier runs (fairlane's own, queue __batches__) too",
    )
    json_option(p)
    _bulk_options(
        action(
            "cancel",
            "end a run, or every matching run, and their descendants CANCELED (a no-op "
            "on an ended run)",
            cmd_cancel,
        )
    )
    _bulk_options(
        action(
            "retry",
            "requeue a FAILED, CRASHED, TIMED_OUT, EXPIRED or SYSTEM_FAILURE run, or every "
            "matching one, for one more attempt (its last error is cleared; no TTL)",
            cmd_retry,
        )
    )
    p = action("reschedule", "move a DELAYED run's start", cmd_reschedule)
    p.add_argument("run_id", type=int)
    p.add_argument("delay", help="from now: seconds or a duration such as 90s, 5m, 2h30m")
