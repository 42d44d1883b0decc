"""Batch triggers: two-phase creation, streamed NDJSON items, fair processing."""
