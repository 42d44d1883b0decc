"""The SQL objects (functions, triggers, views) that ``sql/`` defines, rendered for a schema.

Revisions own tables, columns, indexes, constraints and data; every object lives in ``sql/``
under a ``-- function:``, ``-- trigger:`` or ``-- view:`` header and is installed by
``install_objects`` at the end of every upgrade: in dependency order, in one transaction, under
the migration lock. ``<schema>.schema_objects`` records each object's checksum (of its rendered
statement), so an upgrade re-creates exactly the objects whose text changed (or that went
missing), drops the ones that left ``sql/``, and leaves the rest alone: a second
``fairlane migrate`` touches nothing.

A function is replaced in place (``CREATE OR REPLACE``) when PostgreSQL allows it; when its
return type or parameter names changed it is dropped and created, and so are the triggers and
views of ``sql/`` that depend on it. A changed argument list makes a new overload: the old one
is dropped, so only the current signature remains.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from fairlane.engine.objects import Entry, object_entries, render
from fairlane.errors import SchemaObjectError

_REFERENCE = re.compile(r"\{schema\}\.(\w+)")
# Every function and trigger that releases before the install step (revisions up to 0009)
# made. They were never recorded in schema_objects, so when one of them leaves sql/, the
# install step still knows it is fairlane's to drop (and so does a downgrade to base).
UNRECORDED_LEGACY = frozenset(
    {
        "abort_unsealed_batches",
        "begin_waiting",
        "cancel_run",
        "charge_environment",
        "check_queue_sizes",
        "claim_candidates",
        "claim_from_environment",
        "claim_runs",
        "complete_due_waitpoints",
        "complete_run_waitpoint",
        "create_batch",
        "expire_ttl_runs",
        "fail_batch_item",
        "find_idempotent_run",
        "finish_batch",
        "ingest_batch_items",
        "join_debounced_run",
        "lock_debounce_key",
        "mark_environments_active",
        "notify_runs_inserted",
        "numeric_setting",
        "promote_delayed_runs",
        "prune_debounce_keys",
        "prune_finished_runs",
        "reclaim_expired_leases",
        "record_batch_item",
        "reschedule_run",
        "resume_run",
        "retry_run",
        "return_rate_tokens",
        "run_due_periodic_jobs",
        "runs_complete_waitpoints",
        "runs_notify_inserted",
        "slot_holders",
        "sweep_concurrency",
        "take_rate_tokens",
        "trigger_keyed_run",
        "trigger_keyed_runs",
        "trigger_requests",
        "wake_waiting_runs",
    }
)
_TRIGGER_TABLE = re.compile(r"\bON\s+\{schema\}\.(\w+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SqlObject:
    kind: str  # function, trigger or view
    name: str
    statement: str  # rendered for one schema
    checksum: str
    depends_on: tuple[str, ...]  # names of other objects of sql/ it refers to
    table: str | None = None  # a trigger's table


def checksum(statement: str) -> str:
    return hashlib.sha256(statement.encode("utf-8")).hexdigest()


@cache
def manifest(schema: str) -> tuple[SqlObject, ...]:
    """Every object of ``sql/`` rendered for ``schema``, dependencies first."""
    return build_objects(object_entries(), schema)


def build_objects(entries: Sequence[Entry], schema: str) -> tuple[SqlObject, ...]:
    """Object definitions rendered for ``schema``, dependencies first."""
    names = {entry.name for entry in entries}
    objects: list[SqlObject] = []
    for entry in entries:
        statement = render(entry.template, schema)
        referenced = set(_REFERENCE.findall(entry.template)) & names
        depends_on = tuple(sorted(referenced - {entry.name}))
        table = None
        if entry.kind == "trigger":
            on = _TRIGGER_TABLE.search(entry.template)
            if on is None:
                raise SchemaObjectError(entry.name, "a trigger must name its table as {schema}.x")
            table = on.group(1)
        objects.append(
            SqlObject(entry.kind, entry.name, statement, checksum(statement), depends_on, table)
        )
    return tuple(_dependency_order(objects))


def _dependency_order(objects: list[SqlObject]) -> list[SqlObject]:
    """Objects ordered so that each comes after what it refers to; ties keep file order."""
    pending = {obj.name: obj for obj in objects}
    placed: list[SqlObject] = []
    done: set[str] = set()
    while pending:
        ready = [obj for obj in pending.values() if set(obj.depends_on) <= done]
        if not ready:
            raise SchemaObjectError(", ".join(sorted(pending)), "they refer to each other")
        for obj in ready:
            placed.append(obj)
            done.add(obj.name)
            del pending[obj.name]
    return placed


def expected_checksums(schema: str) -> dict[str, str]:
    return {obj.name: obj.checksum for obj in manifest(schema)}
