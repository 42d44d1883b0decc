"""``fairlane keys``: create, list and revoke API keys of the HTTP API (fairlane.web).

``create`` prints the new key once, on its last line; only its hash is stored, so a lost key
is revoked and replaced, never shown again.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fairlane.cli.common import connection_options
from fairlane.models import ApiKey
from fairlane.schema.check import connect_checked
from fairlane.web import keys


def _document(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "kind": key.kind,
        "environment": key.environment,
        "name": key.name,
        "prefix": key.prefix,
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def cmd_create(args: argparse.Namespace) -> int:
    if args.admin == (args.environment is not None):
        raise SystemExit("fairlane keys create: give --environment E, or --admin")
    with connect_checked(args.dsn, args.schema) as conn:
        record, key = keys.create_key(
            conn, args.environment, name=args.name, admin=args.admin, schema=args.schema
        )
    scope = "admin (every environment, dashboard)" if record.is_admin else record.environment
    print(f"created API key {record.id} ({record.prefix}...) for {scope}")
    print("store it now: it is shown this once")
    print(key)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        found = keys.list_keys(conn, args.environment, include_revoked=args.all, schema=args.schema)
    if args.json:
        print(json.dumps([_document(key) for key in found], indent=2))
        return 0
    print(f"{'id':>6}  {'kind':<12}{'environment':<20}{'prefix':<14}{'name':<20}last used")
    for key in found:
        used = key.last_used_at.isoformat(timespec="seconds") if key.last_used_at else "never"
        if key.revoked_at is not None:
            used += "  (revoked)"
        print(
            f"{key.id:>6}  {key.kind:<12}{key.environment or '-':<20}{key.prefix + '...':<14}"
            f"{key.name or '':<20}{used}"
        )
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    with connect_checked(args.dsn, args.schema) as conn:
        record = keys.revoke_key(
            conn, args.key_id, environment=args.environment, schema=args.schema
        )
    print(f"API key {record.id} ({record.prefix}...) revoked")
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("keys", help="create, list and revoke HTTP API keys")
    actions = parser.add_subparsers(dest="keys", required=True)

    def action(name: str, help: str, func: Any) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help)
        connection_options(sub)
        sub.set_defaults(func=func)
        return sub

    p = action("create", "a new key; printed once, on the last line", cmd_create)
    p.add_argument("--environment", help="the environment the key is confined to")
    p.add_argument(
        "--admin", action="store_true", help="an admin key: every environment and the dashboard"
    )
    p.add_argument("--name", help="a label, to tell keys apart")
    p = action("list", "keys (never the keys themselves: their prefixes)", cmd_list)
    p.add_argument("--environment", help="only this environment's keys")
    p.add_argument("--all", action="store_true", help="revoked keys too")
    p.add_argument("--json", action="store_true")
    p = action("revoke", "revoke a key at once", cmd_revoke)
    p.add_argument("key_id", type=int)
    p.add_argument("--environment", help="refuse unless the key is this environment's")
