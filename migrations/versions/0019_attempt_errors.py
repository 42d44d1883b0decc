"""Runs keep the error of each attempt, not only the last one.

``attempt_errors`` holds the errors of a run's most recent failed attempts in full (the newest
last, each with its attempt number and when it ended) and how many older ones were dropped to
keep the row bounded; ``error`` stays the last one. NULL until an attempt fails. A nullable
column without a default is added without rewriting the table.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from fairlane.schema.revision import schema as migration_schema

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("attempt_errors", JSONB), schema=migration_schema())


def downgrade() -> None:
    op.drop_column("runs", "attempt_errors", schema=migration_schema())
