"""``fairlane maintenance`` and ``fairlane settings``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from fairlane import maintenance
from fairlane.cli.common import connection_options, flag_pair, json_option, print_json
from fairlane.schema.check import connect_checked


def cmd_maintenance(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        if args.run_now:
            result = maintenance.run_now(conn, args.run_now, schema=args.schema)
            print(json.dumps({args.run_now: result}, indent=2))
            return 0
        if args.job:
            enabled = args.enabled
            maintenance.configure_job(
                conn, args.job, interval_s=args.interval, enabled=enabled, schema=args.schema
            )
        jobs = maintenance.list_jobs(conn, schema=args.schema)
    if args.json:
        print_json([asdict(job) for job in jobs])
        return 0
    print(f"{'job':<26}{'every':>9}{'runs':>8}  {'last run':<21}{'next due':<21}last result")
    for job in jobs:
        name = job.name if job.enabled else f"{job.name} (off)"
        outcome = f"error: {job.last_error}" if job.last_error else json.dumps(job.last_result)
        last = f"{job.last_started_at:%Y-%m-%d %H:%M:%S}" if job.last_started_at else "never"
        print(
            f"{name:<26}{job.interval_s:>8}s{job.run_count:>8}  {last:<21}"
            f"{job.next_due_at:%Y-%m-%d %H:%M:%S}  {outcome}"
        )
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        if args.set:
            name, raw = args.set
            maintenance.set_setting(conn, name, json.loads(raw), schema=args.schema)
        settings = maintenance.list_settings(conn, schema=args.schema)
    if args.json:
        print_json([asdict(setting) for setting in settings])
        return 0
    for setting in settings:
        print(f"{setting.name:<22}{json.dumps(setting.value):>12}  {setting.description}")
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("maintenance", help="periodic jobs: list, configure, run now")
    connection_options(parser)
    json_option(parser)
    parser.add_argument("--run-now", metavar="JOB", help="make JOB due and run it once now")
    parser.add_argument("--job", help="the job that --interval/--enable/--disable change")
    parser.add_argument("--interval", type=float, help="seconds between ticks of --job")
    flag_pair(
        parser,
        "--enable",
        "--disable",
        "enabled",
        on_help="run --job on its interval",
        off_help="stop running --job",
    )
    parser.set_defaults(func=cmd_maintenance)

    parser = commands.add_parser("settings", help="engine settings: batch sizes, retention, TTL")
    connection_options(parser)
    json_option(parser)
    parser.add_argument(
        "--set", nargs=2, metavar=("NAME", "JSON"), help="e.g. --set max_ttl_s 3600"
    )
    parser.set_defaults(func=cmd_settings)
