"""Idempotency keys: the stored key is a hash of the caller's key and its scope.

A second trigger of the same task in the same environment with the same stored key returns the
run the first one made, for as long as the key is active: until it expires (default 30 days,
the ``idempotency_key_ttl_s`` setting) or its run ends FAILED, CRASHED, TIMED_OUT, EXPIRED or
SYSTEM_FAILURE, which frees the key for a new run. A CANCELED or COMPLETED run keeps its key.

Scopes, as in the seeds' SDK: ``run`` (the default) adds the parent run, so each parent gets its
own child for a key; ``attempt`` adds the parent run and its attempt, so a retried parent makes
new children; ``global`` adds nothing. Without a parent run every scope acts as ``global``.
"""

from __future__ import annotations

import enum
import hashlib
import json

from fairlane.errors import TriggerOptionError


class IdempotencyScope(enum.StrEnum):
    RUN = "run"
    ATTEMPT = "attempt"
    GLOBAL = "global"


def check_scope(value: object) -> IdempotencyScope:
    """The scope named by ``value``; raises ``TriggerOptionError`` for any other value."""
    if isinstance(value, str):
        try:
            return IdempotencyScope(value)
        except ValueError:
            pass
    choices = ", ".join(scope.value for scope in IdempotencyScope)
    raise TriggerOptionError("idempotency_scope", value, f"must be one of {choices}")


def stored_key(
    key: str,
    scope: str = IdempotencyScope.RUN,
    *,
    parent_run_id: int | None = None,
    parent_attempt: int | None = None,
) -> str:
    """The key as stored in ``runs.idempotency_key``: SHA-256 of the key and its scope.

    Hashing keeps the unique index narrow whatever the key's length, and keeps a global key
    from ever colliding with a scoped one.
    """
    parts: list[object] = [key]
    chosen = check_scope(scope)
    if parent_run_id is not None and chosen is IdempotencyScope.RUN:
        parts += ["run", parent_run_id]
    elif parent_run_id is not None and chosen is IdempotencyScope.ATTEMPT:
        if parent_attempt is None:
            raise TriggerOptionError(
                "parent_attempt", None, "idempotency_scope 'attempt' needs the parent's attempt"
            )
        parts += ["attempt", parent_run_id, parent_attempt]
    encoded = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()
