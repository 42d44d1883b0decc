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

from typing import LiteralString

from psycopg import sql


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
