"""Active environments: the claim ranks only the environments known to have work.

``claim_candidates`` reads the environments with ``drained`` false through a partial index,
instead of scanning the queued index for every environment with work on each claim. The
claim's functions changed signature here: their earlier forms are dropped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import LiteralString

import sqlalchemy as sa
from alembic import op

from fairlane.schema.revision import drop_functions
from fairlane.schema.revision import schema as migration_schema

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RETIRED: tuple[LiteralString, ...] = (
    "claim_runs(integer, double precision, text, text[], text[])",
    "claim_candidates(integer, text[])",
)


def upgrade() -> None:
    op.create_index(
        "environments_active_idx",
        "environments",
        ["name"],
        schema=migration_schema(),
        postgresql_where=sa.text("NOT drained"),
    )
    drop_functions(*RETIRED)


def downgrade() -> None:
    op.drop_index("environments_active_idx", table_name="environments", schema=migration_schema())
