"""Every periodic job and every engine setting, each described once (see template.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairlane.maintenance.template import JobSpec, SettingSpec, count, flag, seconds

JOBS: tuple[JobSpec, ...] = (
    JobSpec(
        "reclaim_expired_leases",
        "reclaim_expired_leases",
        "reclaim.sql",
        "Runs whose lease lapsed go back to QUEUED (or CRASHED on their last attempt).",
        (count("reclaim_batch_size"), count("reclaim_max_batches")),
        repairs=(("requeued", "expired_lease"), ("crashed", "expired_lease")),
    ),
    JobSpec(
        "promote_delayed_runs",
        "promote_delayed_runs",
        "promotion.sql",
        "DELAYED runs whose time has come become QUEUED.",
        (count("promote_batch_size"), count("promote_max_batches")),
    ),
    JobSpec(
        "expire_ttl_runs",
        "expire_ttl_runs",
        "ttl.sql",
        "QUEUED runs past their time to live become EXPIRED.",
        (count("ttl_batch_size"), count("ttl_max_batches")),
    ),
    JobSpec(
        "complete_due_waitpoints",
        "complete_due_waitpoints",
        "waitpoints.sql",
        "Time waitpoints and token timeouts that are due complete, readying their waiters.",
    ),
    JobSpec(
        "sweep_concurrency",
        "sweep_concurrency",
        "sweeper.sql",
        "Repairs what a crash can leave: leases past max_lease_s, environments wrongly marked"
        " drained, WAITING runs whose waitpoints all completed.",
        (seconds("max_lease_s"), flag("sweep_repair_waiting")),
        repairs=(
            ("repaired_runs", "executing_without_lease"),
            ("environments_fixed", "environment_marked_drained"),
            ("waiting_repaired", "missed_wakeup"),
        ),
    ),
    JobSpec(
        "prune_finished_runs",
        "prune_finished_runs",
        "pruning.sql",
        "Deletes finished runs older than the retention, with their edges and waitpoints,"
        " until caught up or its time budget is spent (then it runs again at once).",
        (
            seconds("prune_retention_s"),
            count("prune_batch_size"),
            seconds("prune_budget_s"),
            count("prune_max_batches"),
        ),
    ),
    JobSpec(
        "prune_debounce_keys",
        "prune_debounce_keys",
        "debounce_keys.sql",
        "Deletes debounce keys whose run has started or ended.",
        (count("debounce_prune_batch_size"),),
    ),
    JobSpec(
        "prune_rate_buckets",
        "prune_rate_buckets",
        "rate_buckets.sql",
        "Deletes the rate buckets of concurrency keys that are full again (not served for a"
        " burst's worth of their rate).",
        (count("prune_batch_size"),),
    ),
    JobSpec(
        "abort_unsealed_batches",
        "abort_unsealed_batches",
        "batches.sql",
        "Aborts batches whose items did not all arrive by their seal deadline, and fails items"
        " whose carrier run ended without making their run.",
        repairs=(("orphaned_items", "orphaned_batch_item"),),
    ),
    JobSpec(
        "prune_finished_batches",
        "prune_finished_batches",
        "pruning.sql",
        "Deletes finished batches older than the retention, with their items.",
    ),
    JobSpec(
        "prune_dashboard_sessions",
        "prune_dashboard_sessions",
        "sessions.sql",
        "Deletes dashboard sessions that ended: past their end, idle too long, or of a revoked"
        " key.",
        (count("prune_batch_size"),),
    ),
    JobSpec(
        "prune_dead_workers",
        "prune_dead_workers",
        "workers.sql",
        "Deletes the registry rows of workers not seen within their bound (their lease, at"
        " least three heartbeat intervals): crashed, killed or hung.",
    ),
)

# Settings read outside the periodic jobs: by the trigger, the batch path and the lease.
ENGINE_SETTINGS: tuple[SettingSpec, ...] = (
    seconds("max_ttl_s", nullable=True),
    seconds("idempotency_key_ttl_s"),
    seconds("debounce_max_delay_s"),
    count("batch_max_items"),
    count("batch_item_max_bytes"),
    count("batch_refill_amount", 0),
    seconds("batch_refill_interval_s", 0.001),
    count("batch_bucket_max", 0),
    count("batch_concurrency", 0),
    count("batch_item_max_attempts"),
    seconds("batch_seal_timeout_s"),
    # The limit of an environment a trigger creates; null leaves new environments unlimited.
    SettingSpec("environment_concurrency_limit", "count", 0, nullable=True),
)

SETTINGS: dict[str, SettingSpec] = {
    spec.name: spec
    for spec in (*ENGINE_SETTINGS, *(setting for job in JOBS for setting in job.settings))
}
JOBS_BY_NAME: dict[str, JobSpec] = {job.name: job for job in JOBS}
REPAIR_KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(kind for job in JOBS for _, kind in job.repairs)
)


def repairs_in(results: Mapping[str, Any]) -> dict[str, int]:
    """The repairs that the jobs' results (by job name, as the runner returns them) report,
    by kind. A job that failed, or one not described here, reports none."""
    found: dict[str, int] = {}
    for name, result in results.items():
        job = JOBS_BY_NAME.get(name)
        if job is None or not isinstance(result, dict):
            continue
        for key, kind in job.repairs:
            value = result.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                found[kind] = found.get(kind, 0) + int(value)
    return found
