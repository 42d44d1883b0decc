"""Batch triggers: two-phase creation, streamed NDJSON items, fair processing.

``AsyncBatchClient`` opens its own connection; the functions take a psycopg connection.
"""

from fairlane.batches.api import batch_items, create_batch, get_batch, set_batch_limits
from fairlane.batches.client import AsyncBatchClient
from fairlane.batches.ingest import count_items, ingest_file, ingest_items

__all__ = [
    "AsyncBatchClient",
    "batch_items",
    "count_items",
    "create_batch",
    "get_batch",
    "ingest_file",
    "ingest_items",
    "set_batch_limits",
]
