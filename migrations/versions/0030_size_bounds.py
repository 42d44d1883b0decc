"""Size bounds: a trigger into a deep size-limited queue no longer counts the queue each time.

A trigger into a queue (or environment) with a size limit counted the runs waiting there, up to
the limit, under the size lock: with 100,000 runs waiting, 30 ms a trigger, and the triggers of
the queue are serialised. ``size_bounds`` keeps, per limited queue and environment, an upper
bound of the runs that can be waiting there: the runs waiting or held (EXECUTING or WAITING,
which may come back to wait) when it was last counted, plus every run admitted since. A trigger
whose runs fit under the bound takes no count; one that may not fit counts, as before
(sql/triggering/sizes.sql). Written only under the size locks; a change of a size limit
deletes the bounds it governs, so runs admitted while a queue had no limit are counted again.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision_helpers import schema as migration_schema

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "size_bounds",
        sa.Column("environment", sa.Text, primary_key=True),
        # 'queue' or 'environment'; an environment's bound has the queue ''.
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("queue", sa.Text, primary_key=True),
        sa.Column("bound", sa.BigInteger, nullable=False),
        sa.CheckConstraint("scope IN ('queue', 'environment')", name="size_bounds_scope_check"),
        schema=migration_schema(),
    )


def downgrade() -> None:
    op.drop_table("size_bounds", schema=migration_schema())
