"""One queued index per run: ``runs_queued_idx`` is dropped.

A queued run entered ``runs_queued_idx`` (every queued run, in queue order) and one of
``runs_queued_keyless_idx`` or ``runs_queued_key_idx``. Index entries are most of a bulk
trigger's cost in the server, and a keyless run paid for two queued entries where one holds
all it needs: the claim reads a queue without keys from ``runs_queued_keyless_idx``, and the
statements that want every queued run of a queue (counts, heads, the loose scans that find
environments and queues with queued runs) read both indexes. Dropped concurrently: the runs
table is large.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from fairlane.schema.revision_helpers import create_index_concurrently, drop_index_concurrently

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    drop_index_concurrently("runs_queued_idx")


def downgrade() -> None:
    create_index_concurrently(
        "runs_queued_idx", "runs", "(environment, queue, queue_order, id) WHERE status = 'QUEUED'"
    )
