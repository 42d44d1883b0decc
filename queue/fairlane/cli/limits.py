"""``fairlane limits``: show and change caps, pauses, size limits, DRR settings and the rate
limit."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import psycopg

from fairlane import limits
from fairlane.cli.common import connection_options, flag_pair, json_option, print_json
from fairlane.schema.check import connect_checked


def _limit(value: str | None) -> Any:
    if value is None:
        return limits.UNCHANGED
    return None if value in ("none", "unlimited") else int(value)


def _queue_rate(args: argparse.Namespace) -> dict[str, Any]:
    """The queue's rate options as set_queue takes them: none given, none passed."""
    if args.rate is None:
        extra = args.rate_period is not None or args.rate_burst is not None
        return {"rate_period_s": args.rate_period} if extra else {}
    if args.rate in ("none", "off"):
        return {"rate_limit": None}
    rate: dict[str, Any] = {"rate_limit": int(args.rate)}
    if args.rate_period is not None:
        rate["rate_period_s"] = args.rate_period
    if args.rate_burst is not None:
        rate["rate_burst"] = args.rate_burst
    return rate


def _paused(args: argparse.Namespace) -> bool | None:
    paused: bool | None = args.paused
    return paused


def _show(conn: psycopg.Connection[Any], schema: str | None, include_carriers: bool) -> None:
    settings = limits.scheduler_settings(conn, schema=schema)
    rate = f"{settings.rate_limit_per_s}/s" if settings.rate_limit_per_s else "off"
    print(
        f"scheduler: quantum {settings.quantum}, max deficit {settings.max_deficit}, "
        f"global cap {settings.global_concurrency_limit or 'none'}, rate limit {rate}"
    )
    header = f"{'environment':<20}{'queue':<20}{'env cap':>9}{'queue cap':>10}"
    print(f"{header}{'running':>9}{'queued':>9}{'delayed':>9}{'size limit':>18}  state")
    for row in limits.limits_table(conn, include_carriers=include_carriers, schema=schema):
        env_cap = (
            "-" if row["env_limit"] is None else str(int(row["env_limit"] * row["burst_factor"]))
        )
        queue_cap = "-" if row["queue_limit"] is None else str(row["queue_limit"])
        state = "paused" if row["env_paused"] or row["queue_paused"] else ""
        if row["queue_rate_limit"] is not None:
            state = f"{state} rate {_rate_text(row)}".strip()
        print(
            f"{row['environment']:<20}{row['queue']:<20}{env_cap:>9}{queue_cap:>10}"
            f"{row['running']:>9}{row['queued']:>9}{row['delayed']:>9}{_sizes(row):>18}  {state}"
        )


def _rate_text(row: dict[str, Any]) -> str:
    """A queue's rate per key as "10/1s burst 10"."""
    period = row["queue_rate_period_s"] or 1.0
    burst = row["queue_rate_burst"] or row["queue_rate_limit"]
    return f"{row['queue_rate_limit']}/{period:g}s burst {burst} per key"


def _sizes(row: dict[str, Any]) -> str:
    """Queue size limit / environment size limit, "-" for unlimited."""
    queue, env = row["queue_size_limit"], row["env_size_limit"]
    return f"{'-' if queue is None else queue}/{'-' if env is None else env}"


def _show_keys(conn: Any, args: argparse.Namespace) -> None:
    """A queue's busiest concurrency keys: running, then queued."""
    rows = limits.busiest_keys(conn, args.environment, args.name, most=args.top, schema=args.schema)
    if args.json:
        print_json(rows)
        return
    print(f"{'concurrency key':<40}{'running':>9}{'queued':>9}")
    for row in rows:
        print(f"{row['concurrency_key']:<40}{row['running']:>9}{row['queued']:>9}")


def cmd_limits(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        if args.action == "keys":
            _show_keys(conn, args)
            return 0
        if args.action == "env":
            limits.set_environment(
                conn,
                args.name,
                concurrency_limit=_limit(args.limit),
                burst_factor=args.burst,
                paused=_paused(args),
                size_limit=_limit(args.size_limit),
                schema=args.schema,
            )
        elif args.action == "queue":
            limits.set_queue(
                conn,
                args.environment,
                args.name,
                concurrency_limit=_limit(args.limit),
                paused=_paused(args),
                size_limit=_limit(args.size_limit),
                total_limit=_limit(args.total_limit),
                schema=args.schema,
                **_queue_rate(args),
            )
        elif args.action == "scheduler":
            rate: Any = limits.UNCHANGED
            if args.rate is not None:
                rate = None if args.rate in ("none", "off") else float(args.rate)
            limits.set_scheduler(
                conn,
                quantum=args.quantum,
                max_deficit=args.max_deficit,
                global_concurrency_limit=_limit(args.global_limit),
                rate_limit_per_s=rate,
                rate_burst=args.rate_burst,
                schema=args.schema,
            )
        if args.json:
            print_json(
                {
                    "scheduler": asdict(limits.scheduler_settings(conn, schema=args.schema)),
                    "queues": limits.limits_table(
                        conn, include_carriers=args.include_carriers, schema=args.schema
                    ),
                }
            )
        else:
            _show(conn, args.schema, args.include_carriers)
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "limits", help="show or change caps, size limits, pauses and rate limits"
    )
    connection_options(parser)
    json_option(parser)
    parser.add_argument(
        "--include-carriers",
        action="store_true",
        help="list the batch carriers' queue (__batches__, fairlane's own) too",
    )
    parser.set_defaults(func=cmd_limits, action=None)
    actions = parser.add_subparsers(dest="action")

    env = actions.add_parser("env", help="an environment's cap, burst factor, pause")
    env.add_argument("name")
    env.add_argument("--limit", help="concurrency limit, or 'none'")
    env.add_argument("--burst", type=float, help="burst factor (cap = floor(limit x burst))")
    queue = actions.add_parser("queue", help="a queue's cap, pause")
    queue.add_argument("environment")
    queue.add_argument("name")
    queue.add_argument(
        "--limit", help="concurrency limit (per concurrency key when runs have keys), or 'none'"
    )
    queue.add_argument("--total-limit", help="cap across the queue's concurrency keys, or 'none'")
    queue.add_argument(
        "--rate", help="runs started per period, per concurrency key (keyless: one), or 'off'"
    )
    queue.add_argument("--rate-period", type=float, help="the rate's period in seconds (default 1)")
    queue.add_argument("--rate-burst", type=int, help="most started at once (default: the rate)")
    keys = actions.add_parser("keys", help="a queue's busiest concurrency keys")
    keys.add_argument("environment")
    keys.add_argument("name", help="the queue")
    keys.add_argument("--top", type=int, default=10, help="how many keys (default 10)")
    for action in (env, queue):
        action.add_argument(
            "--size-limit", help="most runs waiting to start (queued or delayed), or 'none'"
        )
        flag_pair(
            action,
            "--pause",
            "--resume",
            "paused",
            on_help="hand out no runs",
            off_help="hand out runs again",
        )
        connection_options(action)
        json_option(action)
        action.set_defaults(func=cmd_limits)

    scheduler = actions.add_parser("scheduler", help="DRR quantum/max deficit, global caps")
    scheduler.add_argument("--quantum", type=int)
    scheduler.add_argument("--max-deficit", type=int)
    scheduler.add_argument("--global-limit", help="global concurrency cap, or 'none'")
    scheduler.add_argument("--rate", help="runs started per second, or 'off'")
    scheduler.add_argument("--rate-burst", type=float, help="bucket size (default: one second)")
    connection_options(scheduler)
    json_option(scheduler)
    scheduler.set_defaults(func=cmd_limits)
