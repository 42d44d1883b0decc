"""The SQL objects (functions, triggers, views) that ``sql/`` defines, and the repeatable step
that installs them.

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
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from fairlane.errors import SchemaObjectError
from fairlane.sqlfiles import Entry, object_entries, render

_REFERENCE = re.compile(r"\{schema\}\.(\w+)")
# Every function and trigger that releases before the install step (revisions up to 0009)
# made. They were never recorded in schema_objects, so when one of them leaves sql/, the
# install step still knows it is fairlane's to drop (and so does a downgrade to base).
UNRECORDED_LEGACY = frozenset(
    {
        "abort_unsealed_batches", "begin_waiting", "cancel_run", "charge_environment",
        "check_queue_sizes", "claim_candidates", "claim_from_environment", "claim_runs",
        "complete_due_waitpoints", "complete_run_waitpoint", "create_batch", "expire_ttl_runs",
        "fail_batch_item", "find_idempotent_run", "finish_batch", "ingest_batch_items",
        "join_debounced_run", "lock_debounce_key", "mark_environments_active",
        "notify_runs_inserted", "numeric_setting", "promote_delayed_runs",
        "prune_debounce_keys", "prune_finished_runs", "reclaim_expired_leases",
        "record_batch_item", "reschedule_run", "resume_run", "retry_run",
        "return_rate_tokens", "run_due_periodic_jobs", "runs_complete_waitpoints",
        "runs_notify_inserted", "slot_holders", "sweep_concurrency", "take_rate_tokens",
        "trigger_keyed_run", "trigger_keyed_runs", "trigger_requests", "wake_waiting_runs",
    }
)  # fmt: skip
_TRIGGER_TABLE = re.compile(r"\bON\s+\{schema\}\.(\w+)", re.IGNORECASE)
Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class SqlObject:
    kind: str  # function, trigger or view
    name: str
    statement: str  # rendered for one schema
    checksum: str
    depends_on: tuple[str, ...]  # names of other objects of sql/ it refers to
    table: str | None = None  # a trigger's table


@dataclass(slots=True)
class InstallResult:
    """What one run of the install step did, by object name."""

    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.replaced or self.dropped)


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


# -- installing -------------------------------------------------------------------------------


def migration_lock(schema: str) -> sql.Composed:
    """The advisory lock that serialises migrations of one schema (revisions and objects)."""
    return sql.SQL(
        "SELECT pg_advisory_xact_lock(hashtext('fairlane.migrate'), hashtext({}))"
    ).format(sql.Literal(schema))


def install_objects(
    conn: Conn, schema: str, objects: Sequence[SqlObject] | None = None
) -> InstallResult:
    """Bring the schema's functions, triggers and views to ``objects`` (default: ``sql/``), in
    one transaction. Returns what changed."""
    wanted = list(objects if objects is not None else manifest(schema))
    with conn.transaction():
        conn.execute(migration_lock(schema))
        # Catalog names (regprocedure, regclass) come out schema-qualified whatever the role's
        # search_path, so recorded identities compare and drop the same from any session.
        conn.execute("SET LOCAL search_path = pg_catalog")
        installer = _Installer(conn, schema, wanted)
        return installer.run()


class _Installer:
    def __init__(self, conn: Conn, schema: str, wanted: list[SqlObject]) -> None:
        self.conn = conn
        self.schema = schema
        self.wanted = wanted
        self.by_name = {obj.name: obj for obj in wanted}
        self.recorded = _recorded(conn, schema)
        self.present = _present(conn, schema)
        self.result = InstallResult()
        # Objects that must be made again whatever their checksum says (a dependency of theirs
        # was dropped and made again).
        self.forced: set[str] = set()

    def run(self) -> InstallResult:
        removed = [name for name in self.recorded if name not in self.by_name]
        for name in removed:
            if self.recorded[name][0] != "function":
                self._drop_recorded(name)
        self._drop_unrecorded_legacy("trigger")
        for obj in self.wanted:
            if self._up_to_date(obj):
                self.result.unchanged += 1
                continue
            identity = self._install(obj)
            self._record(obj, identity)
        for name in removed:
            if self.recorded[name][0] == "function":
                self._drop_recorded(name)
        self._drop_unrecorded_legacy("function")
        return self.result

    def _drop_unrecorded_legacy(self, kind: str) -> None:
        """Objects an older release made that sql/ no longer defines and that were never
        recorded (they predate schema_objects)."""
        for name, found_kind, identity in _catalog(self.conn, self.schema):
            if (
                found_kind == kind
                and name in UNRECORDED_LEGACY
                and name not in self.by_name
                and name not in self.recorded
            ):
                self._drop(name, kind, identity)
                self.result.dropped.append(name)

    def _up_to_date(self, obj: SqlObject) -> bool:
        recorded = self.recorded.get(obj.name)
        return (
            obj.name not in self.forced
            and recorded is not None
            and recorded[2] == obj.checksum
            and recorded[1] in self.present.get(obj.name, set())
        )

    def _install(self, obj: SqlObject) -> str:
        (self.result.replaced if obj.name in self.recorded else self.result.created).append(
            obj.name
        )
        if obj.kind == "function":
            return self._install_function(obj)
        if obj.kind == "trigger":
            old = self.recorded.get(obj.name)
            identity = _trigger_identity(self.conn, self.schema, obj)
            if old is not None and old[1] != identity and old[1] in self.present.get(obj.name, ()):
                self._drop(obj.name, "trigger", old[1])
            self.conn.execute(obj.statement)
            return identity
        try:
            with self.conn.transaction():
                self.conn.execute(obj.statement)
        except psycopg.errors.InvalidTableDefinition:
            # CREATE OR REPLACE VIEW cannot drop or retype columns: make it again.
            self._drop(obj.name, "view", _view_identity(self.conn, self.schema, obj.name))
            self.conn.execute(obj.statement)
        return _view_identity(self.conn, self.schema, obj.name)

    def _install_function(self, obj: SqlObject) -> str:
        before = _overloads(self.conn, self.schema, obj.name)
        try:
            with self.conn.transaction():
                self.conn.execute(obj.statement)
        except psycopg.errors.InvalidFunctionDefinition:
            # Its return type or parameter names changed: CREATE OR REPLACE refuses.
            self._drop_dependents(obj.name)
            for identity in before:
                self._drop(obj.name, "function", identity)
            self.conn.execute(obj.statement)
            before = set()
        after = _overloads(self.conn, self.schema, obj.name)
        made = after - before or (after if len(after) == 1 else set())
        if len(made) != 1:
            raise SchemaObjectError(
                obj.name, f"cannot tell which of {sorted(after)} its statement made"
            )
        (identity,) = made
        for stale in sorted(after - made):
            self._drop_dependents(obj.name)
            self._drop(obj.name, "function", stale)
        return identity

    def _drop_dependents(self, name: str) -> None:
        """Drop the triggers and views of sql/ that depend on ``name`` (directly or through
        others), and make them again later in this run."""
        for obj in self.wanted:
            if obj.name in self.forced or not self._depends(obj, name):
                continue
            self.forced.add(obj.name)
            if obj.kind in ("trigger", "view"):
                recorded = self.recorded.get(obj.name)
                identity = recorded[1] if recorded else None
                if identity is None and obj.kind == "trigger":
                    identity = _trigger_identity(self.conn, self.schema, obj)
                elif identity is None:
                    identity = _view_identity(self.conn, self.schema, obj.name)
                self._drop(obj.name, obj.kind, identity)

    def _depends(self, obj: SqlObject, name: str) -> bool:
        seen: set[str] = set()
        stack = list(obj.depends_on)
        while stack:
            current = stack.pop()
            if current == name:
                return True
            if current not in seen and current in self.by_name:
                seen.add(current)
                stack.extend(self.by_name[current].depends_on)
        return False

    def _drop_recorded(self, name: str) -> None:
        kind, identity, _ = self.recorded[name]
        self._drop(name, kind, identity)
        self.conn.execute(
            sql.SQL("DELETE FROM {}.schema_objects WHERE name = {}").format(
                sql.Identifier(self.schema), sql.Literal(name)
            )
        )
        self.result.dropped.append(name)

    def _drop(self, name: str, kind: str, identity: str) -> None:
        self.conn.execute(_drop_statement(kind, identity))
        self.present.get(name, set()).discard(identity)

    def _record(self, obj: SqlObject, identity: str) -> None:
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_objects (name, kind, identity, checksum) "
                "VALUES ({}, {}, {}, {}) ON CONFLICT (name) DO UPDATE "
                "SET kind = EXCLUDED.kind, identity = EXCLUDED.identity, "
                "checksum = EXCLUDED.checksum, installed_at = now()"
            ).format(
                sql.Identifier(self.schema),
                sql.Literal(obj.name),
                sql.Literal(obj.kind),
                sql.Literal(identity),
                sql.Literal(obj.checksum),
            )
        )
        self.present.setdefault(obj.name, set()).add(identity)


def _drop_statement(kind: str, identity: str) -> sql.Composed:
    # Identities come from the catalog (regprocedure, regclass), already quoted as needed.
    keyword = {"function": "FUNCTION", "trigger": "TRIGGER", "view": "VIEW"}[kind]
    return sql.SQL("DROP {} IF EXISTS {}").format(sql.SQL(keyword), sql.SQL(identity))


def _trigger_identity(conn: Conn, schema: str, obj: SqlObject) -> str:
    return f"{_quote_ident(conn, obj.name)} ON {_regclass(conn, schema, obj.table or '')}"


def _view_identity(conn: Conn, schema: str, name: str) -> str:
    return _regclass(conn, schema, name)


def _regclass(conn: Conn, schema: str, name: str) -> str:
    """How the catalog spells a relation (what _catalog returns), even before it exists."""
    qualified = sql.Identifier(schema, name).as_string(None)
    row = conn.execute(
        "SELECT coalesce(to_regclass(%s)::text, quote_ident(%s) || '.' || quote_ident(%s))",
        (qualified, schema, name),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _quote_ident(conn: Conn, name: str) -> str:
    row = conn.execute("SELECT quote_ident(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def _overloads(conn: Conn, schema: str, name: str) -> set[str]:
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace = to_regnamespace(%s) AND p.proname = %s",
        (schema, name),
    ).fetchall()
    return {identity for (identity,) in rows}


def _recorded(conn: Conn, schema: str) -> dict[str, tuple[str, str, str]]:
    """name -> (kind, identity, checksum) of what the install step recorded."""
    table = sql.Identifier(schema, "schema_objects")
    rows = conn.execute(
        sql.SQL("SELECT name, kind, identity, checksum FROM {}").format(table)
    ).fetchall()
    return {name: (kind, identity, digest) for name, kind, identity, digest in rows}


def _catalog(conn: Conn, schema: str) -> list[tuple[str, str, str]]:
    """(name, kind, identity) of every function, trigger and view in the schema now."""
    rows = conn.execute(
        """
        SELECT p.proname, 'function', p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = to_regnamespace(%(schema)s)
        UNION ALL
        SELECT t.tgname, 'trigger', quote_ident(t.tgname) || ' ON ' || t.tgrelid::regclass::text
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND NOT t.tgisinternal
        UNION ALL
        SELECT c.relname, 'view', c.oid::regclass::text FROM pg_class c
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND c.relkind = 'v'
        """,
        {"schema": schema},
    ).fetchall()
    return [(str(name), str(kind), str(identity)) for name, kind, identity in rows]


def _present(conn: Conn, schema: str) -> dict[str, set[str]]:
    present: dict[str, set[str]] = {}
    for name, _kind, identity in _catalog(conn, schema):
        present.setdefault(name, set()).add(identity)
    return present


# -- dropping everything (``fairlane migrate --downgrade base``) -----------------------------


def drop_objects(conn: Conn, schema: str) -> list[str]:
    """Drop every trigger, view and function of fairlane's in the schema: the ones recorded,
    the ones ``sql/`` defines and the ones older releases made. Returns their identities. Run it inside a
    transaction (its search_path setting is local to it)."""
    conn.execute("SET LOCAL search_path = pg_catalog")
    names = {obj.name for obj in manifest(schema)} | UNRECORDED_LEGACY
    has_table = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".schema_objects',)
    ).fetchone()
    if has_table and has_table[0]:
        names |= set(_recorded(conn, schema))
    found = [item for item in _catalog(conn, schema) if item[0] in names]
    dropped: list[str] = []
    for kind in ("trigger", "view", "function"):
        for _name, found_kind, identity in sorted(found):
            if found_kind == kind:
                conn.execute(_drop_statement(kind, identity))
                dropped.append(identity)
    return dropped
