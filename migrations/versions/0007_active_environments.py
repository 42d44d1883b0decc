"""Active environments: the claim ranks only the environments known to have work.

``claim_candidates`` reads the environments with ``drained`` false through a partial index,
instead of scanning the queued index for every environment with work on each claim. That scan
runs when the caller asks (``full_scan``: the worker does when a notification announced work)
or when the known environments cannot fill the claim; what it finds joins the active ones.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import LiteralString

import sqlalchemy as sa
from alembic import op

from fairlane.migrate import drop_functions, migration_schema, run_frozen_sql, run_named_sql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REPLACED: tuple[LiteralString, ...] = (
    "claim_runs(integer, double precision, text, text[], text[])",
    "claim_candidates(integer, text[])",
)
INSTALLED: tuple[LiteralString, ...] = (
    "claim_runs(integer, double precision, text, text[], text[], boolean)",
    "claim_candidates(integer, text[], boolean)",
    "mark_environments_active(text[], text[])",
)


def upgrade() -> None:
    op.create_index(
        "environments_active_idx",
        "environments",
        ["name"],
        schema=migration_schema(),
        postgresql_where=sa.text("NOT drained"),
    )
    drop_functions(*REPLACED)
    run_named_sql("create_mark_environments_active", "create_claim_candidates", "create_claim_runs")


def downgrade() -> None:
    drop_functions(*INSTALLED)
    op.drop_index("environments_active_idx", table_name="environments", schema=migration_schema())
    run_frozen_sql("claim_0006.sql", "claim_candidates_0006", "claim_runs_0006")
