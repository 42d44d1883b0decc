"""What every ``fairlane`` command shares: the parser class (help shows every default), the
connection options, exclusive flag pairs, and the documented exit codes."""

from __future__ import annotations

import argparse
import json
from typing import Any

# The documented exit codes; which error ends with which is fairlane.errors_policy's table.
from fairlane.errors_policy import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_SCHEMA, EXIT_USAGE

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_SCHEMA",
    "EXIT_USAGE",
    "HelpFormatter",
    "Parser",
    "connection_options",
    "flag_pair",
    "json_option",
    "print_json",
]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless its help already says it or there is none to show
    (None, an off flag)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Every parser of the command tree (subcommands inherit the class): help lists each
    option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def connection_options(parser: argparse.ArgumentParser) -> None:
    """``--dsn`` and ``--schema``, given before or after the subcommand. Below the top level
    they default to SUPPRESS, so a subcommand never overwrites what an outer level was given."""
    parser.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="database URL (default: $DATABASE_URL or postgresql://127.0.0.1:5432/fairlane)",
    )
    parser.add_argument(
        "--schema",
        default=argparse.SUPPRESS,
        help="fairlane's schema (default: $FAIRLANE_SCHEMA or fairlane)",
    )


def flag_pair(
    parser: argparse.ArgumentParser, on: str, off: str, dest: str, *, on_help: str, off_help: str
) -> None:
    """Two opposite flags, refused together; ``dest`` is True, False or None (neither)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(on, dest=dest, action="store_const", const=True, help=on_help)
    group.add_argument(off, dest=dest, action="store_const", const=False, help=off_help)
    parser.set_defaults(**{dest: None})


def json_option(parser: argparse.ArgumentParser) -> None:
    """``--json`` on a read command (also accepted before the subcommand)."""
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON instead of a table",
    )


def print_json(value: Any) -> None:
    print(json.dumps(value, default=str, indent=2))
