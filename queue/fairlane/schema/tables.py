"""The single source of fairlane's tables: SQLAlchemy Core ``MetaData``.

The revisions in ``migrations/versions`` are checked against it (tests/migrations). Tables live
in their own PostgreSQL schema, whose name is configurable, so the builder takes it as an
argument. Functions, triggers and views are not here: they live in ``sql/`` and are installed
by ``fairlane.schema.objects``.
"""

from __future__ import annotations

from functools import cache

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from fairlane.models import RunStatus

RUN_STATUSES = tuple(status.value for status in RunStatus)
VERSION_TABLE = "fairlane_alembic_version"
# timestamptz - interval is only STABLE, so the priority offset is taken in epoch seconds:
# immutable arithmetic, exact to the microsecond.
QUEUE_ORDER = "to_timestamp(date_part('epoch', queued_at - to_timestamp(0)) - priority)"


def _status_check() -> CheckConstraint:
    allowed = ", ".join(f"'{status}'" for status in RUN_STATUSES)
    return CheckConstraint(f"status IN ({allowed})", name="runs_status_check")


def _runs(metadata: MetaData) -> Table:
    return Table(
        "runs",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("environment", Text, nullable=False, server_default="default"),
        Column("queue", Text, nullable=False, server_default="default"),
        Column("task", Text, nullable=False),
        Column("payload", JSONB, nullable=False),
        Column("status", Text, nullable=False),
        Column("priority", Integer, nullable=False, server_default="0"),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("max_attempts", Integer, nullable=False, server_default="3"),
        # The attempt whose waits the run's executions keep: 1, then the next attempt after
        # each failure that is retried. A redelivery (lapsed lease, shutdown) counts an attempt
        # but keeps it, so a replay finds the waits it made.
        Column("wait_attempt", Integer, nullable=False, server_default="1"),
        # When a DELAYED run becomes claimable (first start or retry backoff).
        Column("available_at", DateTime(timezone=True)),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("started_at", DateTime(timezone=True)),
        Column("finished_at", DateTime(timezone=True)),
        # The fence: every worker write matches id AND lease_token.
        Column("lease_token", UUID(as_uuid=True)),
        Column("lease_until", DateTime(timezone=True)),
        Column("worker_id", Text),
        Column("result", JSONB),
        Column("error", JSONB),
        # The errors of the most recent failed attempts, newest last, and how many older ones
        # were dropped: {"earlier": n, "attempts": [{"attempt", "failed_at", "error"}, ...]}.
        Column("attempt_errors", JSONB),
        Column("tags", ARRAY(Text), nullable=False, server_default="{}"),
        Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        Column("machine", Text),
        Column("max_duration_s", Double),
        # Time to live while queued: armed on first enqueue (trigger, or promotion of a
        # delayed run), never on a retry.
        Column("ttl_s", Double),
        Column("expires_at", DateTime(timezone=True)),
        # The run that triggered this one: cancel reaches down through it (no foreign key, so
        # pruning a finished parent never touches its children).
        Column("parent_run_id", BigInteger),
        # SHA-256 of the caller's key and scope (fairlane.triggering.idempotency). Unique per
        # environment and task while set; freeing a key moves it to inactive_idempotency_key.
        Column("idempotency_key", Text),
        Column("idempotency_key_expires_at", DateTime(timezone=True)),
        Column("inactive_idempotency_key", Text),
        # Waitpoints: somebody waits on this run; a WAITING run whose waitpoints all completed.
        Column("has_waiters", Boolean, nullable=False, server_default=text("false")),
        Column("resume_ready", Boolean, nullable=False, server_default=text("false")),
        # Batches: the batch and item this run was made for (one run per item).
        Column("batch_id", BigInteger),
        Column("batch_index", Integer),
        # When the run last entered its queue: its trigger, the end of its delay or retry
        # backoff (promotion), a manual retry. A run handed back (release, lease reclaim,
        # sweeper) keeps it, and so its place.
        Column("queued_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        # The claim's order within a queue: queued_at minus priority seconds, so priority is a
        # head start and nothing waits forever behind higher priorities.
        Column("queue_order", DateTime(timezone=True), Computed(QUEUE_ORDER, persisted=True)),
        # The run's key inside its queue (NULL: none): the queue's concurrency_limit bounds
        # each key's EXECUTING runs, keyless runs counting as one key (sql/claim/keys.sql).
        Column("concurrency_key", Text),
        _status_check(),
        CheckConstraint("max_attempts >= 1", name="runs_max_attempts_check"),
        # The runs workers hold under a lease. Slots are derived from it (a run holds a slot
        # exactly while EXECUTING: the status key skips an environment's waiting runs), and the
        # lease reclaim walks it for lapsed leases. The lease's end is in no index, so a
        # heartbeat can be a HOT update.
        Index(
            "runs_held_idx",
            "environment",
            "status",
            "queue",
            postgresql_where=text("status IN ('EXECUTING', 'WAITING')"),
        ),
        # The queued runs are in two indexes, each run in one (its entries are most of a
        # trigger's cost): the ones with a key here, the others in runs_queued_keyless_idx.
        # Statements wanting every queued run of a queue read both (sql/runs/queued.sql).
        # A keyed queue's runs by key, then in queue order: the claim's walk over its keys.
        Index(
            "runs_queued_key_idx",
            "environment",
            "queue",
            "concurrency_key",
            "queue_order",
            "id",
            postgresql_where=text("status = 'QUEUED' AND concurrency_key IS NOT NULL"),
        ),
        # The queued runs without a key, in queue order: the claim reads a queue without keys
        # here, and a keyed queue's keyless turn finds its first one whatever the keys have
        # queued ahead of it. Its leading column also serves the loose index scans that find
        # environments with queued runs.
        Index(
            "runs_queued_keyless_idx",
            "environment",
            "queue",
            "queue_order",
            "id",
            postgresql_where=text("status = 'QUEUED' AND concurrency_key IS NULL"),
        ),
        Index("runs_delayed_idx", "available_at", postgresql_where=text("status = 'DELAYED'")),
        Index(
            "runs_expiring_idx",
            "expires_at",
            postgresql_where=text("status = 'QUEUED' AND expires_at IS NOT NULL"),
        ),
        # Pruning reads finished runs in the order they become prunable: retention counts from
        # their end, or from their idempotency key's expiry while the key is active.
        Index(
            "runs_prunable_idx",
            # Written as reflection reads it back, line breaks included, so that alembic's
            # comparison sees it equal (only COMPLETED and CANCELED runs keep their key).
            text(
                "GREATEST(finished_at,\nCASE\n    WHEN idempotency_key IS NOT NULL AND "
                "(status = ANY (ARRAY['COMPLETED'::text, 'CANCELED'::text])) "
                "THEN idempotency_key_expires_at\n    ELSE NULL::timestamp with time zone\nEND)"
            ),
            postgresql_where=text("finished_at IS NOT NULL"),
        ),
        # Queue size limits count QUEUED runs through the queued indexes and DELAYED ones here.
        Index(
            "runs_delayed_queue_idx",
            "environment",
            "queue",
            postgresql_where=text("status = 'DELAYED'"),
        ),
        Index(
            "runs_idempotency_key_idx",
            "environment",
            "task",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "runs_parent_idx", "parent_run_id", postgresql_where=text("parent_run_id IS NOT NULL")
        ),
        # Ready runs keep room reserved in their queue: claims leave it to them.
        Index(
            "runs_resumable_idx",
            "environment",
            "queue",
            postgresql_where=text("status = 'WAITING' AND resume_ready"),
        ),
        Index(
            "runs_batch_item_idx",
            "batch_id",
            "batch_index",
            unique=True,
            postgresql_where=text("batch_id IS NOT NULL"),
        ),
        postgresql_with={"fillfactor": "70"},
    )


def _periodic_jobs(metadata: MetaData) -> Table:
    return Table(
        "periodic_jobs",
        metadata,
        Column("name", Text, primary_key=True),
        # A SQL function in fairlane's schema, called with no arguments, returning jsonb.
        Column("function", Text, nullable=False),
        Column("interval_s", Double, nullable=False),
        Column("enabled", Boolean, nullable=False, server_default=text("true")),
        Column(
            "next_due_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
        ),
        Column("last_started_at", DateTime(timezone=True)),
        Column("last_finished_at", DateTime(timezone=True)),
        Column("last_result", JSONB),
        Column("last_error", Text),
        Column("run_count", BigInteger, nullable=False, server_default="0"),
        CheckConstraint("interval_s > 0", name="periodic_jobs_interval_check"),
    )


def _environments(metadata: MetaData) -> Table:
    return Table(
        "environments",
        metadata,
        Column("name", Text, primary_key=True),
        # NULL is unlimited. The environment cap is floor(concurrency_limit * burst_factor).
        Column("concurrency_limit", Integer),
        Column("burst_factor", Numeric(6, 2), nullable=False, server_default="1.0"),
        Column("paused", Boolean, nullable=False, server_default=text("false")),
        # Fair-scheduling state: runs handed out, and whether it ran out of queued runs (true
        # until a scan of the queued runs finds it has some: sql/claim/claim.sql).
        Column("served", BigInteger, nullable=False, server_default="0"),
        Column("drained", Boolean, nullable=False, server_default=text("true")),
        Column("last_served_at", DateTime(timezone=True)),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        # Hard cap on its runs waiting to start (QUEUED or DELAYED), all queues; NULL unlimited.
        Column("size_limit", Integer),
        # Batch creation token bucket and batch processing concurrency; NULL takes the setting.
        Column("batch_refill_amount", Double),
        Column("batch_refill_interval_s", Double),
        Column("batch_bucket_max", Double),
        Column("batch_concurrency", Integer),
        CheckConstraint(
            "concurrency_limit IS NULL OR concurrency_limit >= 0", name="environments_limit_check"
        ),
        CheckConstraint("size_limit IS NULL OR size_limit >= 0", name="environments_size_check"),
        CheckConstraint("burst_factor >= 1", name="environments_burst_check"),
        # The claim's turn order of the environments with work (sql/claim/turns.sql): least
        # served first, then the one served longest ago, then the name. Written as reflection
        # reads it back.
        Index(
            "environments_turn_idx",
            "served",
            text("COALESCE(last_served_at, '-infinity'::timestamp with time zone)"),
            "name",
            postgresql_where=text("(NOT drained) AND (NOT paused)"),
        ),
    )


def _queues(metadata: MetaData) -> Table:
    return Table(
        "queues",
        metadata,
        Column("environment", Text, primary_key=True),
        Column("name", Text, primary_key=True),
        # NULL is unlimited; the queue cap is min(concurrency_limit, environment limit), per
        # concurrency key when its runs have keys (keyless runs count as one key).
        Column("concurrency_limit", Integer),
        Column("paused", Boolean, nullable=False, server_default=text("false")),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        # Hard cap on its runs waiting to start (QUEUED or DELAYED); NULL is unlimited.
        Column("size_limit", Integer),
        # The cap across all its keys; NULL is unlimited.
        Column("total_limit", Integer),
        # The last concurrency key a claim served here: the next claim's walk starts after it.
        Column("key_cursor", Text),
        # A rate per concurrency key (keyless runs share one): rate_limit runs per
        # rate_period_s seconds, at most rate_burst at once (NULL: rate_limit). NULL: no rate.
        Column("rate_limit", Integer),
        Column("rate_period_s", Double),
        Column("rate_burst", Integer),
        CheckConstraint(
            "concurrency_limit IS NULL OR concurrency_limit >= 0", name="queues_limit_check"
        ),
        CheckConstraint("total_limit IS NULL OR total_limit >= 0", name="queues_total_limit_check"),
        CheckConstraint("size_limit IS NULL OR size_limit >= 0", name="queues_size_check"),
        CheckConstraint(
            "(rate_limit IS NULL OR rate_limit > 0)"
            " AND (rate_period_s IS NULL OR rate_period_s > 0)"
            " AND (rate_burst IS NULL OR rate_burst > 0)",
            name="queues_rate_check",
        ),
        # The queues with a rate: the claim's charge looks here first (sql/claim/round.sql).
        Index(
            "queues_rate_idx",
            "environment",
            "name",
            postgresql_where=text("rate_limit IS NOT NULL"),
        ),
    )


def _rate_buckets(metadata: MetaData) -> Table:
    """When each recently served key's rate bucket is full again (sql/claim/key_rates.sql)."""
    return Table(
        "rate_buckets",
        metadata,
        Column("environment", Text, primary_key=True),
        Column("queue", Text, primary_key=True),
        # '' is the bucket of the queue's keyless runs.
        Column("concurrency_key", Text, primary_key=True),
        Column("full_at", DateTime(timezone=True), nullable=False),
    )


def _size_bounds(metadata: MetaData) -> Table:
    """An upper bound of the runs that can be waiting in each size-limited queue and environment,
    so a trigger that fits under it counts nothing (sql/triggering/sizes.sql)."""
    return Table(
        "size_bounds",
        metadata,
        Column("environment", Text, primary_key=True),
        # 'queue' or 'environment'; an environment's bound has the queue ''.
        Column("scope", Text, primary_key=True),
        Column("queue", Text, primary_key=True),
        Column("bound", BigInteger, nullable=False),
        CheckConstraint("scope IN ('queue', 'environment')", name="size_bounds_scope_check"),
    )


def _scheduler(metadata: MetaData) -> Table:
    return Table(
        "scheduler",
        metadata,
        Column("id", SmallInteger, primary_key=True, server_default="1"),
        Column("quantum", Integer, nullable=False, server_default="25"),
        Column("max_deficit", Integer, nullable=False, server_default="100"),
        Column("global_concurrency_limit", Integer),
        # Runs started per second, as a token bucket refilled by elapsed database time.
        Column("rate_limit_per_s", Double),
        Column("rate_burst", Double),
        Column("rate_tokens", Double, nullable=False, server_default="0"),
        Column(
            "rate_refilled_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
        ),
        CheckConstraint("id = 1", name="scheduler_single_row"),
        CheckConstraint("quantum >= 1 AND max_deficit >= 0", name="scheduler_drr_check"),
    )


def _settings(metadata: MetaData) -> Table:
    return Table(
        "settings",
        metadata,
        # Engine settings read by the SQL functions: batch sizes, retention, maximum TTL.
        Column("name", Text, primary_key=True),
        Column("value", JSONB, nullable=False),
        Column("description", Text, nullable=False, server_default=""),
    )


def _debounce_keys(metadata: MetaData) -> Table:
    return Table(
        "debounce_keys",
        metadata,
        # A debounce key's current run; triggers of the key lock this row
        # (sql/triggering/debounce.sql).
        Column("environment", Text, primary_key=True),
        Column("task", Text, primary_key=True),
        Column("key", Text, primary_key=True),
        Column("run_id", BigInteger),
    )


def _waitpoints(metadata: MetaData) -> Table:
    return Table(
        "waitpoints",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("kind", Text, nullable=False),
        Column("status", Text, nullable=False, server_default="PENDING"),
        # RUN: the awaited run. DATETIME: when it completes. MANUAL: when it times out.
        Column("run_id", BigInteger),
        Column("complete_after", DateTime(timezone=True)),
        Column("timeout_at", DateTime(timezone=True)),
        Column("idempotency_key", Text),
        Column("inactive_idempotency_key", Text),
        Column("idempotency_expires_at", DateTime(timezone=True)),
        Column("is_error", Boolean, nullable=False, server_default=text("false")),
        Column("output", JSONB),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("completed_at", DateTime(timezone=True)),
        # MANUAL: the environment whose API key made the token (fairlane.web); NULL when the
        # library made it.
        Column("environment", Text),
        CheckConstraint(
            "kind IN ('RUN', 'DATETIME', 'MANUAL', 'BATCH')", name="waitpoints_kind_check"
        ),
        CheckConstraint("status IN ('PENDING', 'COMPLETED')", name="waitpoints_status_check"),
        Index("waitpoints_run_idx", "run_id", unique=True, postgresql_where=text("kind = 'RUN'")),
        Index(
            "waitpoints_token_key_idx",
            "idempotency_key",
            unique=True,
            postgresql_where=text("kind = 'MANUAL' AND idempotency_key IS NOT NULL"),
        ),
        Index(
            "waitpoints_prunable_idx",
            text(
                "GREATEST(completed_at,\nCASE\n    WHEN idempotency_key IS NOT NULL "
                "THEN idempotency_expires_at\n    ELSE NULL::timestamp with time zone\nEND)"
            ),
            postgresql_where=text("kind = 'MANUAL' AND status = 'COMPLETED'"),
        ),
        Index(
            "waitpoints_due_idx",
            text("coalesce(complete_after, timeout_at)"),
            postgresql_where=text("status = 'PENDING' AND kind IN ('DATETIME', 'MANUAL')"),
        ),
    )


def _run_waitpoints(metadata: MetaData) -> Table:
    return Table(
        "run_waitpoints",
        metadata,
        # The waiting run, the attempt that waits (its wait_attempt), the call position in its
        # handler, the item of a batch call.
        Column("run_id", BigInteger, primary_key=True),
        Column("attempt", Integer, primary_key=True),
        Column("position", Integer, primary_key=True),
        Column("item", Integer, primary_key=True),
        Column("waitpoint_id", BigInteger, nullable=False),
        Index("run_waitpoints_waitpoint_idx", "waitpoint_id"),
    )


def _run_steps(metadata: MetaData) -> Table:
    schema = metadata.schema
    return Table(
        "run_steps",
        metadata,
        # One row per call position of a run's handler: a step (ctx.step) or a wait. A replay
        # serves a COMPLETED step's result and checks that it asks for what was recorded.
        Column(
            "run_id",
            BigInteger,
            ForeignKey(f"{schema}.runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        Column("position", Integer, primary_key=True),
        Column("kind", Text, nullable=False),
        Column("name", Text, nullable=False),
        # The wait attempt that recorded it (a wait is made again by a later attempt).
        Column("attempt", Integer, nullable=False),
        Column("status", Text, nullable=False),
        Column("result", JSONB),
        Column("error", JSONB),
        Column("started_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("finished_at", DateTime(timezone=True)),
        CheckConstraint("kind IN ('STEP', 'WAIT')", name="run_steps_kind_check"),
        CheckConstraint(
            "status IN ('WAITING', 'COMPLETED', 'FAILED')", name="run_steps_status_check"
        ),
    )


BATCH_STATUSES = ("PENDING", "PROCESSING", "COMPLETED", "PARTIAL_FAILED", "ABORTED")
BATCH_ITEM_STATES = ("PENDING", "TRIGGERED", "FAILED", "SKIPPED")


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def _batches(metadata: MetaData) -> Table:
    return Table(
        "batches",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("environment", Text, nullable=False),
        Column("run_count", Integer, nullable=False),
        Column("status", Text, nullable=False, server_default="PENDING"),
        # Sealed once all run_count items are in; items are never accepted after that.
        Column("sealed", Boolean, nullable=False, server_default=text("false")),
        Column("idempotency_key", Text),
        # The run that waits on the batch, through the BATCH waitpoint.
        Column("parent_run_id", BigInteger),
        Column("waitpoint_id", BigInteger),
        Column("succeeded", Integer, nullable=False, server_default="0"),
        Column("failed", Integer, nullable=False, server_default="0"),
        Column("seal_deadline", DateTime(timezone=True), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("sealed_at", DateTime(timezone=True)),
        Column("completed_at", DateTime(timezone=True)),
        Column("error", JSONB),
        # Items in, raised under the row lock by each ingest slice (counting them grew with
        # the batch).
        Column("received", Integer, nullable=False, server_default="0"),
        CheckConstraint(f"status IN ({_quoted(BATCH_STATUSES)})", name="batches_status_check"),
        CheckConstraint("run_count >= 1", name="batches_run_count_check"),
        Index(
            "batches_idempotency_key_idx",
            "environment",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "batches_finished_idx",
            "completed_at",
            postgresql_where=text("completed_at IS NOT NULL"),
        ),
        Index(
            "batches_seal_deadline_idx",
            "seal_deadline",
            postgresql_where=text("status = 'PENDING' AND NOT sealed"),
        ),
    )


def _batch_items(metadata: MetaData) -> Table:
    return Table(
        "batch_items",
        metadata,
        Column("batch_id", BigInteger, primary_key=True),
        Column("index", Integer, primary_key=True),
        Column("task", Text, nullable=False),
        Column("payload", JSONB),
        Column("options", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        # Past the item size limit: a pre-failed PAYLOAD_TOO_LARGE run at ingest.
        Column("oversized", Boolean, nullable=False, server_default=text("false")),
        Column("state", Text, nullable=False, server_default="PENDING"),
        Column("run_id", BigInteger),
        # The carrier run (task fairlane.batch_item) that turns this item into its run.
        Column("carrier_run_id", BigInteger),
        Column("error", JSONB),
        CheckConstraint(f"state IN ({_quoted(BATCH_ITEM_STATES)})", name="batch_items_state_check"),
        CheckConstraint("index >= 0", name="batch_items_index_check"),
        Index(
            "batch_items_pending_carrier_idx",
            "carrier_run_id",
            postgresql_where=text("state = 'PENDING'"),
        ),
    )


def _batch_buckets(metadata: MetaData) -> Table:
    return Table(
        "batch_buckets",
        metadata,
        # Batch creation token bucket of one environment: tokens left when last refilled.
        Column("environment", Text, primary_key=True),
        Column("tokens", Double, nullable=False),
        Column(
            "refilled_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
        ),
    )


def _schema_objects(metadata: MetaData) -> Table:
    return Table(
        "schema_objects",
        metadata,
        # Every function, trigger and view installed from sql/ (fairlane.schema.objects): its
        # name there, what it is, how the catalog names it (for DROP) and the checksum of the
        # statement that made it, so an upgrade re-creates exactly what changed.
        Column("name", Text, primary_key=True),
        Column("kind", Text, nullable=False),
        Column("identity", Text, nullable=False),
        Column("checksum", Text, nullable=False),
        Column(
            "installed_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
        ),
        CheckConstraint(
            "kind IN ('function', 'trigger', 'view')", name="schema_objects_kind_check"
        ),
    )


API_KEY_KINDS = ("environment", "admin")


def _api_keys(metadata: MetaData) -> Table:
    return Table(
        "api_keys",
        metadata,
        # A key of the HTTP API (fairlane.web): only the SHA-256 of the key is stored; `prefix`
        # (its first characters) tells keys apart in listings. An environment key sees and
        # changes its environment only; an admin key (no environment) every one, and the
        # dashboard.
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("kind", Text, nullable=False),
        Column("environment", Text),
        Column("name", Text),
        Column("prefix", Text, nullable=False),
        Column("secret_hash", Text, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column("last_used_at", DateTime(timezone=True)),
        Column("revoked_at", DateTime(timezone=True)),
        CheckConstraint(f"kind IN ({_quoted(API_KEY_KINDS)})", name="api_keys_kind_check"),
        CheckConstraint(
            "(kind = 'admin') = (environment IS NULL)", name="api_keys_environment_check"
        ),
        Index("api_keys_secret_hash_idx", "secret_hash", unique=True),
    )


def _web_secrets(metadata: MetaData) -> Table:
    return Table(
        "web_secrets",
        metadata,
        # Random secrets the web server signs with (token callback URLs, dashboard sessions,
        # CSRF tokens), made on first use, shared by every server process of the database.
        Column("name", Text, primary_key=True),
        Column("secret", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    )


def _dashboard_sessions(metadata: MetaData) -> Table:
    schema = metadata.schema
    return Table(
        "dashboard_sessions",
        metadata,
        # A signed-in dashboard browser: the SHA-256 of its cookie's random secret (never the
        # secret), the admin key it signed in with (revoking the key deletes its sessions).
        Column("secret_hash", Text, primary_key=True),
        Column(
            "key_id",
            BigInteger,
            ForeignKey(f"{schema}.api_keys.id", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column(
            "last_seen_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
        ),
        # The absolute end, however active the session is.
        Column("expires_at", DateTime(timezone=True), nullable=False),
        # The idle time it was opened under: idle longer than this (or than the server's
        # current setting, if shorter), it has ended.
        Column("idle_s", Double, nullable=False),
        CheckConstraint("idle_s > 0", name="dashboard_sessions_idle_check"),
        Index("dashboard_sessions_key_idx", "key_id"),
    )


def _schedules(metadata: MetaData) -> Table:
    return Table(
        "schedules",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("environment", Text, nullable=False),
        # task:<name> for a schedule declared on a task, else the caller's external id.
        Column("key", Text, nullable=False),
        Column("task", Text, nullable=False),
        Column("cron", Text, nullable=False),
        Column("timezone", Text, nullable=False, server_default="UTC"),
        Column("payload", JSONB),
        # Trigger options of every run it makes (queue, priority, max_attempts, ...).
        Column("options", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
        Column("declared", Boolean, nullable=False, server_default=text("false")),
        Column("paused", Boolean, nullable=False, server_default=text("false")),
        Column("next_fire_at", DateTime(timezone=True), nullable=False),
        Column("last_tick", DateTime(timezone=True)),
        Column("last_run_id", BigInteger),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        UniqueConstraint("environment", "key", name="schedules_environment_key_key"),
        Index("schedules_due_idx", "next_fire_at", postgresql_where=text("NOT paused")),
    )


def _schedule_fires(metadata: MetaData) -> Table:
    schema = metadata.schema
    return Table(
        "schedule_fires",
        metadata,
        Column(
            "schedule_id",
            BigInteger,
            ForeignKey(f"{schema}.schedules.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        Column("tick", DateTime(timezone=True), primary_key=True),
        Column("run_id", BigInteger),
        Column("fired_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    )


def _workers(metadata: MetaData) -> Table:
    return Table(
        "workers",
        metadata,
        # The id the worker claims under (runs.worker_id).
        Column("id", Text, primary_key=True),
        Column("host", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", Text, nullable=False),
        # The tasks it has a handler for; environments and queues it serves, NULL: all.
        Column("tasks", ARRAY(Text), nullable=False, server_default="{}"),
        Column("environments", ARRAY(Text)),
        Column("queues", ARRAY(Text)),
        Column("concurrency", Integer, nullable=False),
        # Not seen for this long (its lease, at least three heartbeats), the worker is gone or
        # hung: it serves nothing, and prune_dead_workers deletes its row.
        Column("stale_after_s", Double, nullable=False),
        # Asked to stop: it claims nothing more.
        Column("stopping", Boolean, nullable=False, server_default=text("false")),
        Column("started_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
        Column(
            "last_seen_at", DateTime(timezone=True), nullable=False, server_default=text("now()")
        ),
        CheckConstraint("stale_after_s > 0", name="workers_stale_after_check"),
    )


@cache
def build_metadata(schema: str) -> MetaData:
    """The MetaData of every fairlane table, placed in ``schema``."""
    metadata = MetaData(schema=schema)
    _runs(metadata)
    _periodic_jobs(metadata)
    _environments(metadata)
    _queues(metadata)
    _rate_buckets(metadata)
    _size_bounds(metadata)
    _scheduler(metadata)
    _settings(metadata)
    _debounce_keys(metadata)
    _waitpoints(metadata)
    _run_waitpoints(metadata)
    _run_steps(metadata)
    _batches(metadata)
    _batch_items(metadata)
    _batch_buckets(metadata)
    _schema_objects(metadata)
    _api_keys(metadata)
    _web_secrets(metadata)
    _dashboard_sessions(metadata)
    _schedules(metadata)
    _schedule_fires(metadata)
    _workers(metadata)
    return metadata
