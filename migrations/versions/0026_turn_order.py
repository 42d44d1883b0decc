"""The turn order of active environments: a claim reads only the environments it will serve.

``claim_runs`` used to rank every active environment (``drained`` false) by its service before
taking from any, a cost that grew with the number of tenants with queued runs. The index
``environments_turn_idx`` keeps the active, unpaused environments in turn order (least served
first, then the one served longest ago, then the name), so a claim reads the next few in order
and stops when it is full (sql/claim/claim.sql). It replaces ``environments_active_idx``, the
active environments by name only. Both built and dropped concurrently: an environments table can
hold many tenants, and claims and triggers go on meanwhile.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from fairlane.schema.revision_helpers import create_index_concurrently, drop_index_concurrently

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_index_concurrently(
        "environments_turn_idx",
        "environments",
        "(served, coalesce(last_served_at, '-infinity'::timestamptz), name)"
        " WHERE NOT drained AND NOT paused",
    )
    drop_index_concurrently("environments_active_idx")


def downgrade() -> None:
    create_index_concurrently("environments_active_idx", "environments", "(name) WHERE NOT drained")
    drop_index_concurrently("environments_turn_idx")
