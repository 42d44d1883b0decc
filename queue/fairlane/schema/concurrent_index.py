"""Indexes built and dropped CONCURRENTLY, so that an upgrade never stops the writes to a table.

A plain ``CREATE INDEX`` takes a SHARE lock on its table for the whole build: every trigger,
claim, heartbeat and completion of the table waits until the build ends, minutes on a runs
table of tens of millions of rows. ``CREATE INDEX CONCURRENTLY`` takes SHARE UPDATE EXCLUSIVE,
which no insert, update or delete conflicts with; it cannot run inside a transaction, so a
revision calls these through ``fairlane.schema.revision_helpers`` inside alembic's autocommit
block (the revision's earlier statements are committed first).

A concurrent build that fails or is interrupted leaves an INVALID index behind (the catalog row
exists, queries ignore it, writes still maintain it). Every step here looks at the catalog
first, so a revision re-run after an interruption (alembic had not recorded it) picks up where
it stopped: an invalid leftover is dropped concurrently and built again, a valid index of the
name is kept, and a build is checked valid before the revision goes on.

Statements go through ``run`` (a callable that executes one statement in autocommit and
returns its rows), so the same steps run on alembic's connection in a revision and on a psycopg
connection in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, LiteralString

from psycopg import sql

from fairlane.errors import IndexBuildError

Run = Callable[[sql.Composed], Sequence[tuple[Any, ...]]]

# Tables whose rows grow with traffic: a revision indexes them only through this module
# (tests/schema/test_concurrent_indexes.py holds every revision after the grandfathered ones
# to it). The others (settings, limits, keys, schedules) stay small enough for a plain build.
LARGE_TABLES = frozenset(
    {
        "runs",
        "waitpoints",
        "run_waitpoints",
        "batches",
        "batch_items",
        "schedule_fires",
        "debounce_keys",
    }
)
# The suffix of the name a replacement is built under before the swap.
REPLACEMENT_SUFFIX = "_next"
# PostgreSQL truncates longer names silently: the catalog look-ups would miss the index.
_MAX_NAME = 63


@dataclass(frozen=True, slots=True)
class IndexDefinition:
    """An index: ``CREATE [UNIQUE] INDEX name ON schema.table <definition>``, the definition
    being what follows the table (``USING gin (tags)``, ``(a, b) WHERE c``), written in the
    revision."""

    schema: str
    name: str
    table: str
    definition: LiteralString
    unique: bool = False

    def create(self) -> sql.Composed:
        return sql.SQL("CREATE {unique}INDEX CONCURRENTLY {name} ON {table} {definition}").format(
            unique=sql.SQL("UNIQUE " if self.unique else ""),
            name=sql.Identifier(self.name),
            table=sql.Identifier(self.schema, self.table),
            definition=sql.SQL(self.definition),
        )


def index_state(run: Run, schema: str, name: str) -> bool | None:
    """Whether the index ``schema.name`` is valid (ready for queries); None: there is none."""
    rows = run(
        sql.SQL(
            "SELECT i.indisvalid AND i.indisready FROM pg_catalog.pg_index i"
            " JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relnamespace = to_regnamespace({schema}) AND c.relname = {name}"
        ).format(schema=sql.Literal(schema), name=sql.Literal(name))
    )
    return bool(rows[0][0]) if rows else None


def build_index(run: Run, index: IndexDefinition) -> bool:
    """Make ``index`` exist and be valid, concurrently. A valid index of its name is kept as it
    is; an invalid one (an interrupted build) is dropped and built again. Returns whether it
    built."""
    _check_name(index.name)
    state = index_state(run, index.schema, index.name)
    if state:
        return False
    if state is not None:
        drop_index(run, index.schema, index.name)
    run(index.create())
    if not index_state(run, index.schema, index.name):
        raise IndexBuildError(index.name, "the concurrent build left it invalid")
    return True


def drop_index(run: Run, schema: str, name: str) -> None:
    """``DROP INDEX CONCURRENTLY IF EXISTS``: waits for the transactions using it, blocks none."""
    _check_name(name)
    run(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(schema, name)))


def replace_index(run: Run, index: IndexDefinition) -> None:
    """Replace the index of ``index.name`` by ``index``: built under a temporary name, then the
    old one dropped concurrently and the new one renamed. Between the two the table has the
    new index under its temporary name, so queries keep an index to plan with.

    Re-run after an interruption, it finishes the swap from where it stopped; once the swap is
    done the names alone cannot tell the new index from the old, so a re-run after that point
    builds the index once more (and ends the same)."""
    temporary = replacement_name(index.name)
    build_index(run, replace(index, name=temporary))
    drop_index(run, index.schema, index.name)
    # A rename takes SHARE UPDATE EXCLUSIVE on the index alone (not on its table), which the
    # statements reading or writing through the index do not conflict with.
    run(
        sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(index.schema, temporary), sql.Identifier(index.name)
        )
    )


def replacement_name(name: str) -> str:
    """The name a replacement of ``name`` is built under."""
    temporary = name + REPLACEMENT_SUFFIX
    _check_name(temporary)
    return temporary


def _check_name(name: str) -> None:
    if len(name.encode("utf-8")) > _MAX_NAME:
        raise IndexBuildError(name, f"a name longer than {_MAX_NAME} bytes would be truncated")
