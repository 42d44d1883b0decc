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
    "global_options_everywhere",
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

    def format_help(self) -> str:
        # Descriptions are the modules' docstrings, whose ``literals`` are markup for the
        # API reference, not for a terminal.
        return super().format_help().replace("``", "")


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


# The top level's options that every subcommand accepts too, after its name.
_GLOBAL_OPTIONS = ("--verbose", "--log-level", "--log-format", "--json", "--dsn", "--schema")


def global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Copy the top level's global options onto every subcommand, at any depth, that does not
    define them itself: ``fairlane worker app:tasks --log-level debug`` and ``fairlane runs
    show 7 --json`` mean what they mean before the subcommand. Below the top level they
    default to SUPPRESS, so a subcommand never overwrites what an outer level was given."""
    wanted = [parser._option_string_actions[name] for name in _GLOBAL_OPTIONS]
    for sub in _subcommands(parser):
        for action in wanted:
            if any(option in sub._option_string_actions for option in action.option_strings):
                continue
            copy = sub.add_argument(
                *action.option_strings,
                dest=action.dest,
                default=argparse.SUPPRESS,
                help=action.help,
                **_kind(action),
            )
            copy.metavar = action.metavar


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found.append(sub)
                found.extend(_subcommands(sub))
    return found


def _kind(action: argparse.Action) -> dict[str, Any]:
    """What makes ``action`` parse as it does: a flag, or a value with its type and choices."""
    if isinstance(action, argparse._StoreTrueAction):
        return {"action": "store_true"}
    return {"type": action.type, "choices": action.choices}
