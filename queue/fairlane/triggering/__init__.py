"""Triggering runs: requests, their checks, idempotency, debounce, and the trigger functions
that run on a caller's connection."""
