"""``fairlane schedules``: list, create, pause, resume, delete and trigger cron schedules."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fairlane import schedules
from fairlane.cli.main import _json_argument
from fairlane.models import Schedule
from fairlane.schema.check import connect_checked


def _line(schedule: Schedule) -> str:
    state = "paused" if schedule.paused else f"next {schedule.next_fire_at.isoformat()}"
    return (
        f"{schedule.environment:<14} {schedule.key:<24} {schedule.task:<24} "
        f"{schedule.cron!r:<20} {schedule.timezone:<16} {state}"
    )


def cmd_schedules(args: argparse.Namespace) -> int:
    action = args.action or "list"
    with connect_checked(args.dsn, args.schema) as conn:
        where = {"environment": args.environment, "schema": args.schema}
        if action == "list":
            found = schedules.list_schedules(conn, environment=args.environment, schema=args.schema)
            for schedule in found:
                print(_line(schedule))
        elif action == "create":
            options: dict[str, Any] = {
                "queue": args.queue,
                "priority": args.priority,
                "max_attempts": args.max_attempts,
            }
            made = schedules.create(
                conn,
                args.task,
                args.cron,
                args.timezone,
                external_id=args.external_id,
                payload=_json_argument("--payload", args.payload),
                **where,
                **{name: value for name, value in options.items() if value is not None},
            )
            print(_line(made))
        elif action in ("pause", "resume"):
            change = schedules.pause if action == "pause" else schedules.resume
            print(_line(change(conn, args.external_id, **where)))
        elif action == "delete":
            schedules.delete(conn, args.external_id, **where)
        elif action == "trigger":
            print(json.dumps({"run_id": schedules.trigger(conn, args.external_id, **where)}))
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "schedules", help="list, create, pause, resume, delete cron schedules"
    )
    parser.set_defaults(func=cmd_schedules, action=None, environment=None)
    parser.add_argument("--dsn")
    parser.add_argument("--schema")
    actions = parser.add_subparsers(dest="action")

    listing = actions.add_parser("list", help="every schedule (of one environment)")
    listing.add_argument("--environment")
    create = actions.add_parser("create", help="create or update a schedule")
    create.add_argument("external_id")
    create.add_argument("task")
    create.add_argument("cron", help="5 fields, or 6 with seconds first")
    create.add_argument("--timezone", default="UTC")
    create.add_argument("--payload", help="JSON")
    create.add_argument("--queue")
    create.add_argument("--priority", type=int)
    create.add_argument("--max-attempts", type=int)
    for name, text in (
        ("pause", "stop firing"),
        ("resume", "fire again from the next tick"),
        ("delete", "delete"),
        ("trigger", "trigger its run now"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("external_id")
    for action in (
        listing,
        create,
        *[actions.choices[name] for name in ("pause", "resume", "delete", "trigger")],
    ):
        if action is not listing:
            action.add_argument("--environment", default="default")
        action.add_argument("--dsn")
        action.add_argument("--schema")
        action.set_defaults(func=cmd_schedules)
