"""The helpers the revisions in ``migrations/versions`` call: the migration's schema, SQL
written in the revision, retired functions and triggers dropped.

A revision is never edited once it has landed (migrations/revisions.sha256 holds each file's
hash), and it runs these helpers: their behaviour must never change either. A revision that
needs something new gets a new helper here. Revisions that landed before this module had its
name import it as ``fairlane.schema.revision``, which stays for them.

Revisions own tables, columns, indexes, constraints, data and the dropping of retired function
signatures. Functions, triggers and views are not theirs: ``sql/`` defines them and
``fairlane.schema.objects`` installs them after the revisions, so a revision's SQL is written
in the revision itself and never read from ``sql/``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString

from psycopg import sql

from fairlane.schema.concurrent_index import (
    IndexDefinition,
    Run,
    build_index,
    drop_index,
    replace_index,
)


def schema() -> str:
    """The schema the running migration targets."""
    from alembic import context

    from fairlane.config import schema_name
    from fairlane.schema.migrate import SCHEMA_ATTRIBUTE

    return schema_name(context.config.attributes.get(SCHEMA_ATTRIBUTE))


def execute(template: LiteralString) -> None:
    """Run SQL written in the revision, with ``{schema}`` composed in as an identifier."""
    from alembic import op

    statement = sql.SQL(template).format(schema=sql.Identifier(schema()))
    op.get_bind().exec_driver_sql(statement.as_string(None))


def drop_functions(*signatures: LiteralString) -> None:
    """``DROP FUNCTION IF EXISTS`` each of ``signatures`` (``name(argument types)``) in the
    migration's schema."""
    from alembic import op

    target = sql.Identifier(schema())
    for signature in signatures:
        drop = sql.SQL("DROP FUNCTION IF EXISTS {}.{}").format(target, sql.SQL(signature))
        op.get_bind().exec_driver_sql(drop.as_string(None))


def drop_trigger(name: LiteralString, table: LiteralString) -> None:
    """``DROP TRIGGER IF EXISTS name ON <schema>.table``."""
    from alembic import op

    drop = sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(
        sql.Identifier(name), sql.Identifier(schema(), table)
    )
    op.get_bind().exec_driver_sql(drop.as_string(None))


# -- indexes on large tables, CONCURRENTLY (fairlane.schema.concurrent_index) ----------------


def create_index_concurrently(
    name: str, table: str, definition: LiteralString, *, unique: bool = False
) -> None:
    """``CREATE [UNIQUE] INDEX CONCURRENTLY name ON <schema>.table definition`` in alembic's
    autocommit block, checked valid afterwards; an invalid leftover of an interrupted build is
    dropped and built again, a valid index of the name kept."""
    with _autocommit() as run:
        build_index(run, IndexDefinition(schema(), name, table, definition, unique))


def replace_index_concurrently(
    name: str, table: str, definition: LiteralString, *, unique: bool = False
) -> None:
    """Replace the index ``name`` by one of ``definition``: built concurrently under a
    temporary name, then the old one dropped concurrently and the new one renamed."""
    with _autocommit() as run:
        replace_index(run, IndexDefinition(schema(), name, table, definition, unique))


def drop_index_concurrently(name: str) -> None:
    """``DROP INDEX CONCURRENTLY IF EXISTS <schema>.name`` in alembic's autocommit block."""
    with _autocommit() as run:
        drop_index(run, schema(), name)


@contextmanager
def _autocommit() -> Iterator[Run]:
    """Alembic's autocommit block (the revision's transaction so far is committed), with a
    ``run`` that executes one statement on its connection."""
    from alembic import op

    def run(statement: sql.Composed) -> Sequence[tuple[Any, ...]]:
        result = op.get_bind().exec_driver_sql(statement.as_string(None))
        return [tuple(row) for row in result] if result.returns_rows else []

    with op.get_context().autocommit_block():
        yield run
