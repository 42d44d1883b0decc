"""SQL objects are installed from sql/ with a checksum each, after every upgrade.

Until this revision the revisions installed the functions themselves. From here on they own
tables and data only; ``fairlane.schema.objects`` installs every function, trigger and view
after the revisions and records each one's checksum in ``schema_objects``. A database that an
older release migrated has its functions replaced by the install step that follows this
revision (they are in the table afterwards like on a fresh install).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import schema as migration_schema

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schema_objects",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("identity", sa.Text, nullable=False),
        sa.Column("checksum", sa.Text, nullable=False),
        sa.Column(
            "installed_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.CheckConstraint(
            "kind IN ('function', 'trigger', 'view')", name="schema_objects_kind_check"
        ),
        schema=migration_schema(),
    )


def downgrade() -> None:
    op.drop_table("schema_objects", schema=migration_schema())
