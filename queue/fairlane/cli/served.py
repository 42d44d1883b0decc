"""Whether a live worker serves a task where a run would go, for ``fairlane trigger``: a task
nobody serves (a typo, a task not deployed yet) is queued and waits; the command says so, and
refuses it with ``--strict``."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from fairlane.models import WorkerInfo


def serves(worker: WorkerInfo, task: str, environment: str, queue: str) -> bool:
    return (
        worker.live
        and not worker.stopping
        and task in worker.tasks
        and (worker.environments is None or environment in worker.environments)
        and (worker.queues is None or queue in worker.queues)
    )


def unserved_note(
    workers: Sequence[WorkerInfo], task: str, environment: str, queue: str
) -> str | None:
    """None when a live worker serves ``task`` in ``environment``/``queue``; else why not, with
    the closest task name the live workers know."""
    if any(serves(worker, task, environment, queue) for worker in workers):
        return None
    known = sorted({name for worker in workers if worker.live for name in worker.tasks})
    why = f"no live worker serves task {task!r} in {environment}/{queue}"
    close = difflib.get_close_matches(task, [n for n in known if not n.startswith("fairlane.")])
    if close:
        return f"{why} (did you mean {close[0]!r}?)"
    if not known:
        return f"{why} (no worker is registered)"
    return why
