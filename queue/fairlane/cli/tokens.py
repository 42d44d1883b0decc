"""``fairlane tokens``: create, complete and show tokens (waitpoints that code completes)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from fairlane.cli.common import connection_options
from fairlane.errors import PayloadError
from fairlane.schema.check import connect_checked
from fairlane.waitpoints import complete_token, create_token, get_token


def cmd_create(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        token = create_token(
            conn, idempotency_key=args.idempotency_key, timeout=args.timeout, schema=args.schema
        )
    print(token)
    return 0


def cmd_complete(args: argparse.Namespace) -> int:
    try:
        output = None if args.output is None else json.loads(args.output)
    except json.JSONDecodeError as error:
        raise PayloadError(f"the output is not JSON: {error.msg}") from None
    with connect_checked(args.dsn, args.schema) as conn:
        done = complete_token(conn, args.token_id, output, schema=args.schema)
    print(f"token {args.token_id} " + ("completed" if done else "was already complete"))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        token = get_token(conn, args.token_id, schema=args.schema)
    print(json.dumps(asdict(token), default=str, indent=2))
    return 0


def add_parser(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="create, complete and show tokens")
    actions = tokens.add_subparsers(dest="tokens", required=True)
    p = actions.add_parser("create", help="make a token and print its id")
    connection_options(p)
    p.add_argument("--idempotency-key", help="a second create with this key returns the token")
    p.add_argument("--timeout", help="complete it with an error after this long (90s, 1h, ...)")
    p.set_defaults(func=cmd_create)
    p = actions.add_parser("complete", help="complete a token, waking whoever waits on it")
    connection_options(p)
    p.add_argument("token_id", type=int)
    p.add_argument("output", nargs="?", help="JSON output the waiters receive")
    p.set_defaults(func=cmd_complete)
    p = actions.add_parser("show", help="a token, whole (JSON)")
    connection_options(p)
    p.add_argument("token_id", type=int)
    p.set_defaults(func=cmd_show)
