"""Named SQL, loaded from the ``sql/`` files.

A file holds two kinds of entries, each under a header line:

- ``-- name: <name>``: a statement the runtime sends (``query(name, schema)``), its
  parameters declared under the header, in the order the statement first uses them, as
  ``-- params: <name> <type>, <name> <type>`` lines (as many as it takes; none when it has no
  parameters). The types are PostgreSQL's names of the types the statement gives them
  (``bigint[]``, ``timestamp with time zone``): tests/sql/test_statements.py checks the names
  against the placeholders, the types against the server and the engine's method against both;
- ``-- function: <name>``, ``-- trigger: <name>``, ``-- view: <name>``: the definition of a
  database object, installed by ``fairlane migrate`` after the revisions
  (``fairlane.schema.objects``), never sent by the runtime.

The schema reaches the text through ``psycopg.sql`` composition (an ``Identifier``), never
through string formatting: ``{schema}`` is the quoted schema, ``{schema_name}`` and
``{channel}`` are string literals, ``{channel_identifier}`` is the notification channel as an
identifier; ``{cancel_channel}``/``{cancel_channel_identifier}`` and
``{resume_channel}``/``{resume_channel_identifier}`` are the same for the channels that announce
cancels and resumable runs, ``{finished_channel}``/``{finished_channel_identifier}`` for the one
that announces watched runs ending, ``{changes_channel}``/``{changes_channel_identifier}`` for the
one the HTTP server's event streams follow. Statements are rendered once per schema and cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import LiteralString

from psycopg import sql

from fairlane.errors import SchemaObjectError

_HEADER = re.compile(r"^-- (?P<kind>name|function|trigger|view): (?P<name>\w+)\s*$", re.MULTILINE)
_PARAMS = re.compile(r"^-- params: (?P<params>.+?)\s*$", re.MULTILINE)
_PARAM = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s+(?P<type>\w[\w ]*(?:\[\])?)$")
OBJECT_KINDS = ("function", "trigger", "view")


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter a statement declares: its placeholder's name and its PostgreSQL type."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a ``sql/`` file: a runtime statement or an object definition."""

    kind: str  # "name" (a runtime statement), or one of OBJECT_KINDS
    name: str
    template: str
    source: str  # the file it came from, for error messages
    params: tuple[Param, ...] = ()


def sql_dir() -> Traversable:
    """The ``sql/`` folder: inside the installed wheel, else at the top of the source tree."""
    packaged = resources.files("fairlane") / "_sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "sql"


def parse_entries(source: str, filename: str = "<string>") -> list[Entry]:
    """Split a file into its entries, in file order; text before the first header is a
    comment."""
    entries: list[Entry] = []
    headers = list(_HEADER.finditer(source))
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        end = following.start() if following else len(source)
        raw = source[header.end() : end]
        body = _without_comment_lines(raw).strip()
        kind, name = header.group("kind"), header.group("name")
        params = _declared_params(name, raw) if kind == "name" else ()
        entries.append(Entry(kind, name, body, filename, params))
    return entries


def _declared_params(statement: str, raw: str) -> tuple[Param, ...]:
    """The parameters of the ``-- params:`` lines of a statement's entry."""
    declared: list[Param] = []
    for line in _PARAMS.finditer(raw):
        # A line may end with a comma, the list going on on the next one.
        for item in line.group("params").rstrip(",").split(","):
            found = _PARAM.match(item.strip())
            if found is None:
                raise SchemaObjectError(statement, f"cannot read the parameter {item.strip()!r}")
            declared.append(Param(found.group("name"), found.group("type")))
    names = [param.name for param in declared]
    if len(set(names)) != len(names):
        raise SchemaObjectError(statement, "a parameter is declared twice")
    return tuple(declared)


def parse_named_statements(source: str) -> dict[str, str]:
    """The runtime statements of a file, ``{name: statement}``."""
    statements: dict[str, str] = {}
    for entry in parse_entries(source):
        if entry.kind != "name":
            continue
        if entry.name in statements:
            raise SchemaObjectError(entry.name, "the statement is defined twice")
        statements[entry.name] = entry.template
    return statements


def _without_comment_lines(body: str) -> str:
    """Drop lines that are only a ``--`` comment, except inside ``$$`` function bodies.

    The comments stay in the files for readers; sent with every statement they cost bytes on
    the wire and, past 4 KiB, psycopg's cache of converted queries (it keeps shorter ones).
    An object's checksum is taken after this, so editing a comment outside a function body
    does not re-create the object.
    """
    kept: list[str] = []
    in_body = False
    for line in body.splitlines():
        if not in_body and line.lstrip().startswith("--"):
            continue
        kept.append(line)
        in_body ^= line.count("$$") % 2 == 1
    return "\n".join(kept)


def _sql_files(folder: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    """Every ``.sql`` file under ``folder`` with its path relative to it, in path order."""
    found: list[tuple[str, Traversable]] = []
    for entry in folder.iterdir():
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.extend(_sql_files(entry, f"{relative}/"))
        elif entry.name.endswith(".sql"):
            found.append((relative, entry))
    return sorted(found, key=lambda item: item[0])


@cache
def _entries() -> tuple[Entry, ...]:
    entries: list[Entry] = []
    seen: dict[tuple[bool, str], str] = {}
    for relative, path in _sql_files(sql_dir()):
        for entry in parse_entries(path.read_text("utf-8"), relative):
            key = (entry.kind == "name", entry.name)
            if key in seen:
                raise SchemaObjectError(entry.name, f"{entry.kind} defined in {seen[key]} too")
            seen[key] = relative
            entries.append(entry)
    return tuple(entries)


@cache
def _raw_statements() -> dict[str, str]:
    return {entry.name: entry.template for entry in _entries() if entry.kind == "name"}


@cache
def _declared() -> dict[str, tuple[Param, ...]]:
    return {entry.name: entry.params for entry in _entries() if entry.kind == "name"}


def statement_params(name: str) -> tuple[Param, ...]:
    """The parameters the statement ``name`` declares, in the order it first uses them."""
    return _declared()[name]


def object_entries() -> list[Entry]:
    """Every object definition in ``sql/``, in file order."""
    return [entry for entry in _entries() if entry.kind in OBJECT_KINDS]


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel on which new claimable runs are announced."""
    return f"{schema}.runs"


def cancel_channel_name(schema: str) -> str:
    """The channel on which cancelled EXECUTING runs are announced (payload: the run id)."""
    return f"{schema}.cancel"


def resume_channel_name(schema: str) -> str:
    """The channel on which waiting runs whose waitpoints completed are announced."""
    return f"{schema}.resume"


def finished_channel_name(schema: str) -> str:
    """The channel on which runs somebody waits on (``wait_for_run``, a waiting handler) are
    announced when they end (payload: the run id)."""
    return f"{schema}.finished"


def changes_channel_name(schema: str) -> str:
    """The channel on which runs that were created or changed status, metadata or batch are
    announced (payload: run ids, comma-separated): the HTTP server's event streams."""
    return f"{schema}.changes"


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
        finished_channel=sql.Literal(finished_channel_name(schema)),
        finished_channel_identifier=sql.Identifier(finished_channel_name(schema)),
        changes_channel=sql.Literal(changes_channel_name(schema)),
        changes_channel_identifier=sql.Identifier(changes_channel_name(schema)),
    )
    # Identifiers and literals are quoted without a connection; the result is plain SQL.
    return composed.as_string(None)


def statement_names() -> list[str]:
    return sorted(_raw_statements())
