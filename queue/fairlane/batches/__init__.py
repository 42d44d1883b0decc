"""Batch triggers: two-phase creation, streamed NDJSON items, fair processing.

``client.batches`` (``BatchClient`` on a ``Client``, ``AsyncBatchClient`` on an
``AsyncClient``) keeps a connection of its own; the functions take a psycopg connection and
are async (``*_async``). Their names before the naming convention (``create_batch``,
``ingest_items``, ...) still work for one release, with a ``DeprecationWarning``.
"""

from fairlane.batches.api import (
    batch_items,
    batch_items_async,
    create_batch,
    create_batch_async,
    get_batch,
    get_batch_async,
    set_batch_limits,
    set_batch_limits_async,
)
from fairlane.batches.client import AsyncBatchClient, BatchClient
from fairlane.batches.ingest import (
    count_items,
    ingest_file,
    ingest_file_async,
    ingest_items,
    ingest_items_async,
)

__all__ = [
    "AsyncBatchClient",
    "BatchClient",
    "batch_items_async",
    "count_items",
    "create_batch_async",
    "get_batch_async",
    "ingest_file_async",
    "ingest_items_async",
    "set_batch_limits_async",
]

# The names before the naming convention, importable for one more release (each warns when
# called).
_RENAMED = (batch_items, create_batch, get_batch, ingest_file, ingest_items, set_batch_limits)
