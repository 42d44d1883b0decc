"""Keyless queued runs in an index of their own, so a keyed queue's keyless turn finds them.

A queue with concurrency keys serves its keyless runs as one more key (sql/claim/keys.sql).
They were looked for among the queue's first 1,000 queued runs in queue order
(``runs_queued_idx``), so behind more runs of keys waiting for a slot or a token they waited
too, however long the keys' backlog. ``runs_queued_keyless_idx`` holds the queued runs without
a key, in queue order, so the keyless turn reads its first entry whatever is queued ahead. Each
queued run is in it or in ``runs_queued_key_idx``. Built concurrently: the runs table is large.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from fairlane.schema.revision_helpers import create_index_concurrently, drop_index_concurrently

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_index_concurrently(
        "runs_queued_keyless_idx",
        "runs",
        "(environment, queue, queue_order, id) WHERE status = 'QUEUED' AND concurrency_key IS NULL",
    )


def downgrade() -> None:
    drop_index_concurrently("runs_queued_keyless_idx")
