"""fairlane's database schema: tables (``tables``), the SQL objects installed from ``sql/``
(``objects``), the migrations that build both (``migrate``) and the start-up check that a
database matches this package (``check``)."""

from fairlane.schema.tables import (
    BATCH_ITEM_STATES,
    BATCH_STATUSES,
    RUN_STATUSES,
    VERSION_TABLE,
    build_metadata,
)

__all__ = ["BATCH_ITEM_STATES", "BATCH_STATUSES", "RUN_STATUSES", "VERSION_TABLE", "build_metadata"]
