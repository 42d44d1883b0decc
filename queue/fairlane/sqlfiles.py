"""Named SQL, loaded from the ``sql/`` files.

Each file holds statements under ``-- name: <name>`` headers. The schema reaches the text
through ``psycopg.sql`` composition (an ``Identifier``), never through string formatting:
``{schema}`` is the quoted schema, ``{schema_name}`` and ``{channel}`` are string literals,
``{channel_identifier}`` is the notification channel as an identifier; ``{cancel_channel}`` and
``{cancel_channel_identifier}`` are the same for the channel that announces cancels. Statements
are rendered once per schema and cached.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import LiteralString

from psycopg import sql

_HEADER = re.compile(r"^-- name: (?P<name>\w+)\s*$", re.MULTILINE)


def sql_dir() -> Traversable:
    """The ``sql/`` folder: inside the installed wheel, else at the top of the source tree."""
    packaged = resources.files("fairlane") / "_sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


def parse_named_statements(source: str) -> dict[str, str]:
    """Split a file into ``{name: statement}``; text before the first header is a comment."""
    statements: dict[str, str] = {}
    headers = list(_HEADER.finditer(source))
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        end = following.start() if following else len(source)
        body = _without_comment_lines(source[header.end() : end]).strip()
        name = header.group("name")
        if name in statements:
            raise ValueError(f"SQL statement {name!r} is defined twice")
        statements[name] = body
    return statements


def _without_comment_lines(body: str) -> str:
    """Drop lines that are only a ``--`` comment, except inside ``$$`` function bodies.

    The comments stay in the files for readers; sent with every statement they cost bytes on
    the wire and, past 4 KiB, psycopg's cache of converted queries (it keeps shorter ones).
    """
    kept: list[str] = []
    in_body = False
    for line in body.splitlines():
        if not in_body and line.lstrip().startswith("--"):
            continue
        kept.append(line)
        in_body ^= line.count("$$") % 2 == 1
    return "\n".join(kept)


@cache
def _raw_statements() -> dict[str, str]:
    statements: dict[str, str] = {}
    for entry in sorted(sql_dir().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse_named_statements(entry.read_text("utf-8")).items():
            if name in statements:
                raise ValueError(f"SQL statement {name!r} is defined in two files")
            statements[name] = body
    return statements


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel on which new claimable runs are announced."""
    return f"{schema}.runs"


def cancel_channel_name(schema: str) -> str:
    """The channel on which cancelled EXECUTING runs are announced (payload: the run id)."""
    return f"{schema}.cancel"


def resume_channel_name(schema: str) -> str:
    """The channel on which waiting runs whose waitpoints completed are announced."""
    return f"{schema}.resume"


@cache
def query(name: str, schema: str) -> LiteralString:
    """The statement ``name`` with the schema composed in, ready for psycopg or SQLAlchemy."""
    return render(_raw_statements()[name], schema)


def render(template: str, schema: str) -> LiteralString:
    """Compose the schema (and channel names) into a statement from a ``sql/`` file."""
    composed = sql.SQL(template).format(
        schema=sql.Identifier(schema),
        schema_name=sql.Literal(schema),
        channel=sql.Literal(channel_name(schema)),
        channel_identifier=sql.Identifier(channel_name(schema)),
        cancel_channel=sql.Literal(cancel_channel_name(schema)),
        cancel_channel_identifier=sql.Identifier(cancel_channel_name(schema)),
        resume_channel=sql.Literal(resume_channel_name(schema)),
        resume_channel_identifier=sql.Identifier(resume_channel_name(schema)),
    )
    # Identifiers and literals are quoted without a connection; the result is plain SQL.
    return composed.as_string(None)


def statement_names() -> list[str]:
    return sorted(_raw_statements())
