"""Time waitpoints that pruning left behind are removed.

Before this release, pruning a run removed the time waitpoints it waited on only once they had
come due: a run cancelled while it waited on a later time left its waitpoint behind, with no
edge pointing to it, for good. A time waitpoint is made for the one run that waits on it, in
the transaction that adds the edge, so one with no edge is such an orphan. Pruning now takes
them with their run (sql/maintenance/pruning.sql); this removes the ones it left before.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import schema as migration_schema

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    waitpoints = sa.table("waitpoints", sa.column("id"), sa.column("kind"), schema=schema)
    edges = sa.table("run_waitpoints", sa.column("waitpoint_id"), schema=schema)
    waited_on = sa.exists().where(edges.c.waitpoint_id == waitpoints.c.id)
    op.execute(waitpoints.delete().where(waitpoints.c.kind == "DATETIME", ~waited_on))


def downgrade() -> None:
    """Nothing to restore: the rows were unreachable."""
