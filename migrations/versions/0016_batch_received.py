"""Batches count the items they received in a column of their own.

Every ingest slice decided whether its batch was complete by counting the batch's items: a
count that grows with the batch, so a stream of N items cost O(N²) (a 1,000,000-item batch
spent most of its ingest counting). ``received`` is now raised under the batch row's lock by
the items each slice inserted, and read where the count was.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import schema as migration_schema

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "batches",
        sa.Column("received", sa.Integer, nullable=False, server_default="0"),
        schema=schema,
    )
    batches = sa.table("batches", sa.column("id"), sa.column("received"), schema=schema)
    items = sa.table("batch_items", sa.column("batch_id"), schema=schema)
    counted = (
        sa.select(sa.func.count())
        .select_from(items)
        .where(items.c.batch_id == batches.c.id)
        .scalar_subquery()
    )
    op.execute(batches.update().values(received=counted))


def downgrade() -> None:
    op.drop_column("batches", "received", schema=migration_schema())
