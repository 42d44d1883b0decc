"""Trigger requests as JSON in the database too.

The trigger statements take their requests as one JSON array; ``trigger_keyed_runs`` takes that
JSON instead of one array per field, so its array-taking form is dropped.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from fairlane.schema.revision import drop_functions

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED_RUNS_0008 = (
    "trigger_keyed_runs(text[], text[], text[], text[], integer[], integer[], float8[], "
    "timestamptz[], text[], text[], text[], float8[], float8[], bigint[], text[], float8[], "
    "text[], float8[], boolean[], float8[])"
)


def upgrade() -> None:
    drop_functions(KEYED_RUNS_0008)


def downgrade() -> None:
    """Nothing: the functions are the SQL objects' (dropped with them on a downgrade to base)."""
