"""The worker runtime: claims runs, executes handlers, keeps leases, writes outcomes."""

from fairlane.worker.context import RunContext
from fairlane.worker.handles import Task
from fairlane.worker.registry import TaskDefinition, TaskRegistry
from fairlane.worker.stats import WorkerStats
from fairlane.worker.worker import Worker

__all__ = ["RunContext", "Task", "TaskDefinition", "TaskRegistry", "Worker", "WorkerStats"]
