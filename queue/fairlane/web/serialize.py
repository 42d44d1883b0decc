"""Values as JSON documents: runs, batches, tokens, limits, keys, workers."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from fairlane.models import (
    Batch,
    CancelResult,
    EnvironmentSettings,
    IngestResult,
    ItemRow,
    QueueSettings,
    Run,
    SchedulerSettings,
    Token,
    UnservedTask,
    WorkerInfo,
)


def when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def number(value: Decimal | float | None) -> float | None:
    return float(value) if value is not None else None


def run_json(run: Run) -> dict[str, Any]:
    """A run, without its lease token or its stored idempotency key hash."""
    return {
        "id": run.id,
        "environment": run.environment,
        "queue": run.queue,
        "task": run.task,
        "status": str(run.status),
        "is_final": run.status.is_final,
        "payload": run.payload,
        "result": run.result,
        # The run's result under its earlier name, for one release (README, HTTP API).
        "output": run.result,
        "error": run.error,
        "priority": run.priority,
        "attempts": run.attempts,
        "max_attempts": run.max_attempts,
        "tags": list(run.tags),
        "metadata": run.metadata,
        "machine": run.machine,
        "max_duration_s": run.max_duration_s,
        "parent_run_id": run.parent_run_id,
        "worker_id": run.worker_id,
        "created_at": when(run.created_at),
        "queued_at": when(run.queued_at),
        "available_at": when(run.available_at),
        "started_at": when(run.started_at),
        "finished_at": when(run.finished_at),
        "lease_until": when(run.lease_until),
        "idempotency_key_expires_at": when(run.idempotency_key_expires_at),
        "attempt_errors": [
            {"attempt": e.attempt, "failed_at": when(e.failed_at), "error": e.error}
            for e in run.attempt_errors
        ],
        "earlier_attempt_errors": run.earlier_attempt_errors,
    }


def cancel_json(result: CancelResult) -> dict[str, Any]:
    return {
        "id": result.run_id,
        "canceled": result.canceled,
        "status": str(result.status),
        "previous_status": str(result.previous_status),
        "descendants_canceled": result.descendants_canceled,
    }


def batch_json(batch: Batch) -> dict[str, Any]:
    return {
        "id": batch.id,
        "environment": batch.environment,
        "run_count": batch.run_count,
        "received": batch.received,
        "status": batch.status,
        "sealed": batch.sealed,
        "done": batch.done,
        "succeeded": batch.succeeded,
        "failed": batch.failed,
        "outcome": batch.outcome,
        "runs": asdict(batch.runs),
        "parent_run_id": batch.parent_run_id,
        "created_at": when(batch.created_at),
        "sealed_at": when(batch.sealed_at),
        "completed_at": when(batch.completed_at),
        "error": batch.error,
    }


def ingest_json(result: IngestResult) -> dict[str, Any]:
    return {
        "batch_id": result.batch_id,
        "accepted": result.accepted,
        "oversized": result.oversized,
        "received": result.received,
        "run_count": result.run_count,
        "sealed": result.sealed,
        "status": result.status,
        "lines": result.lines,
    }


def item_json(item: ItemRow) -> dict[str, Any]:
    return {"index": item.index, "state": item.state, "run_id": item.run_id, "error": item.error}


def token_json(token: Token) -> dict[str, Any]:
    return {
        "id": token.id,
        "environment": token.environment,
        "status": token.status,
        "is_error": token.is_error,
        "output": token.output,
        "created_at": when(token.created_at),
        "completed_at": when(token.completed_at),
        "timeout_at": when(token.timeout_at),
    }


def environment_json(settings: EnvironmentSettings) -> dict[str, Any]:
    return {
        "environment": settings.name,
        "concurrency_limit": settings.concurrency_limit,
        "burst_factor": number(settings.burst_factor),
        "cap": settings.cap,
        "size_limit": settings.size_limit,
        "paused": settings.paused,
    }


def queue_json(settings: QueueSettings) -> dict[str, Any]:
    return {
        "environment": settings.environment,
        "queue": settings.name,
        "concurrency_limit": settings.concurrency_limit,
        "size_limit": settings.size_limit,
        "total_limit": settings.total_limit,
        "rate_limit": settings.rate_limit,
        "rate_period_s": settings.rate_period_s,
        "rate_burst": settings.rate_burst,
        "paused": settings.paused,
    }


def scheduler_json(settings: SchedulerSettings) -> dict[str, Any]:
    return {
        "quantum": settings.quantum,
        "max_deficit": settings.max_deficit,
        "global_concurrency_limit": settings.global_concurrency_limit,
        "rate_limit_per_s": settings.rate_limit_per_s,
        "rate_burst": settings.rate_burst,
    }


def limits_row_json(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``limits_table``: a queue, its caps and its counts."""
    env_limit, burst = row["env_limit"], row["burst_factor"]
    return {
        "environment": row["environment"],
        "queue": row["queue"],
        "environment_concurrency_limit": env_limit,
        "burst_factor": number(burst),
        "environment_cap": int(env_limit * burst) if env_limit is not None else None,
        "environment_paused": row["env_paused"],
        "environment_size_limit": row["env_size_limit"],
        "queue_concurrency_limit": row["queue_limit"],
        "queue_paused": row["queue_paused"],
        "queue_size_limit": row["queue_size_limit"],
        "running": row["running"],
        "queued": row["queued"],
        "delayed": row["delayed"],
    }


def worker_json(worker: WorkerInfo) -> dict[str, Any]:
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "tasks": worker.tasks,
        "environments": worker.environments,
        "queues": worker.queues,
        "concurrency": worker.concurrency,
        "live": worker.live,
        "stopping": worker.stopping,
        "started_at": when(worker.started_at),
        "last_seen_at": when(worker.last_seen_at),
    }


def unserved_json(task: UnservedTask) -> dict[str, Any]:
    return {
        "environment": task.environment,
        "task": task.task,
        "queues": task.queues,
        "runs": task.runs,
        "oldest_queued_at": when(task.oldest_queued_at),
    }
