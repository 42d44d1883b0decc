"""The workers registry (sql/worker/registry.sql): a worker's own row, the list, and the tasks
with queued runs that no live worker serves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement, scalar
from fairlane.models import UnservedTask, WorkerInfo

# How many runs at the head of each queue the unserved view reads (sql/worker/registry.sql).
UNSERVED_HEAD = 100


@dataclass(frozen=True, slots=True)
class Registration:
    """What a worker registers: who it is and what it serves (None: all)."""

    id: str
    host: str
    pid: int
    version: str
    tasks: Sequence[str]
    environments: Sequence[str] | None
    queues: Sequence[str] | None
    concurrency: int
    stale_after_s: float


def _worker(row: Row) -> WorkerInfo:
    return WorkerInfo(**row)


def _unserved(row: Row) -> UnservedTask:
    return UnservedTask(**row)


def _list(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)


class Workers(Section):
    def register(self, worker: Registration) -> Statement[str]:
        """A row: the worker's id."""
        params = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "version": worker.version,
            "tasks": list(worker.tasks),
            "environments": _list(worker.environments),
            "queues": _list(worker.queues),
            "concurrency": worker.concurrency,
            "stale_after_s": worker.stale_after_s,
        }
        return self._statement("register_worker", params, scalar)

    def touch(self, worker_id: str, *, stopping: bool) -> Statement[str]:
        """A row when the worker's row is there (else it registers again)."""
        return self._statement("touch_worker", {"id": worker_id, "stopping": stopping}, scalar)

    def deregister(self, worker_id: str) -> Statement[str]:
        return self._statement("deregister_worker", {"id": worker_id}, scalar)

    def list(self) -> Statement[WorkerInfo]:
        return self._statement("list_workers", None, _worker)

    def unserved(self, max_rows: int, head: int = UNSERVED_HEAD) -> Statement[UnservedTask]:
        """The tasks with queued runs and no live worker, longest waiting first."""
        return self._statement("unserved_tasks", {"head": head, "max_rows": max_rows}, _unserved)

    def served(self, task: str, environment: str, queue: str) -> Statement[bool]:
        """One row: whether a live worker serves ``task`` in ``environment`` and ``queue``."""
        params = {"task": task, "environment": environment, "queue": queue}
        return self._statement("task_served", params, scalar)
