"""The drained environments' index: ``environments_drained_idx``.

A claim's full scan (a worker's safety net, once per poll interval) looks for drained
environments with queued runs, to let them join the turn order. It found them by a loose scan
of the queued indexes, one descent per environment with queued runs, and then probed every
one of them for its drained mark: at 10,000 tenants with work, about 0.1 s per scan, most of it
for environments already active. While the drained environments are fewer, it now walks them
instead, and this index lists them. Built concurrently: the environments table may be large.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from fairlane.schema.revision_helpers import create_index_concurrently, drop_index_concurrently

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_index_concurrently("environments_drained_idx", "environments", "(name) WHERE drained")


def downgrade() -> None:
    drop_index_concurrently("environments_drained_idx")
