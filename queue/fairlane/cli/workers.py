"""``fairlane workers``: the workers registry, and the tasks with queued runs that no live
worker serves (which ``fairlane status`` shows too)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from fairlane.cli.common import connection_options, json_option, print_json
from fairlane.client import Client
from fairlane.models import UnservedTask, WorkerInfo


def _listed(values: list[str] | None) -> str:
    return "all" if values is None else ",".join(values) or "-"


def _state(worker: WorkerInfo) -> str:
    if not worker.live:
        return "stale"
    return "stopping" if worker.stopping else "live"


def _ago(moment: datetime, now: datetime) -> str:
    return f"{max((now - moment).total_seconds(), 0.0):.0f}s ago"


def print_workers(workers: list[WorkerInfo]) -> None:
    if not workers:
        print("no worker is registered")
        return
    now = datetime.now(UTC)
    print(
        f"{'worker':<36}{'state':<10}{'version':<10}{'slots':>6}  {'last seen':<11}"
        f"{'started':<21}environments / queues / tasks"
    )
    for worker in workers:
        tasks = [task for task in worker.tasks if not task.startswith("fairlane.")]
        print(
            f"{worker.id:<36}{_state(worker):<10}{worker.version:<10}{worker.concurrency:>6}  "
            f"{_ago(worker.last_seen_at, now):<11}{worker.started_at:%Y-%m-%d %H:%M:%S}  "
            f"{_listed(worker.environments)} / {_listed(worker.queues)} / {_listed(tasks)}"
        )


def print_unserved(unserved: list[UnservedTask]) -> None:
    """The unserved tasks as a table; nothing when there are none."""
    if not unserved:
        return
    now = datetime.now(UTC)
    print("tasks with queued runs and no live worker serving them:")
    print(f"  {'environment':<20}{'task':<30}{'runs':>6}  {'oldest queued':<15}queues")
    for task in unserved:
        print(
            f"  {task.environment:<20}{task.task:<30}{task.runs:>6}  "
            f"{_ago(task.oldest_queued_at, now):<15}{','.join(task.queues)}"
        )


def unserved_json(unserved: list[UnservedTask]) -> list[dict[str, Any]]:
    return [asdict(task) for task in unserved]


def cmd_workers(args: argparse.Namespace) -> int:
    with Client(args.dsn, schema=args.schema) as client:
        workers = client.workers.list()
        unserved = client.workers.unserved()
    if args.json:
        print_json(
            {"workers": [asdict(w) for w in workers], "unserved_tasks": unserved_json(unserved)}
        )
        return 0
    print_workers(workers)
    if unserved:
        print()
        print_unserved(unserved)
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "workers", help="registered workers, and the tasks no live worker serves"
    )
    connection_options(parser)
    json_option(parser)
    parser.set_defaults(func=cmd_workers)
