"""Lease reclaim works in batches like the other jobs: its two settings.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from fairlane.schema.revision import execute

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute(
        """
        INSERT INTO {schema}.settings (name, value, description) VALUES
            ('reclaim_batch_size', '1000', 'Runs whose lease lapsed that reclaim_expired_leases takes per statement'),
            ('reclaim_max_batches', '10', 'Statements per reclaim_expired_leases tick')
        ON CONFLICT (name) DO NOTHING
        """  # noqa: E501
    )


def downgrade() -> None:
    execute(
        "DELETE FROM {schema}.settings WHERE name IN ('reclaim_batch_size', 'reclaim_max_batches')"
    )
