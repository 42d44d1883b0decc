"""What ``fairlane trigger`` says of a task no live worker serves where the run would go (a
typo, a task not deployed yet): the run is queued and waits; ``--strict`` refuses it. Whether
a worker serves it is the registry's rule (``task_served``, sql/worker/registry.sql); this
only words the answer, with the closest task name the live workers know."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from fairlane.models import WorkerInfo


def unserved_note(workers: Sequence[WorkerInfo], task: str, environment: str, queue: str) -> str:
    why = f"no live worker serves task {task!r} in {environment}/{queue}"
    known = sorted({name for worker in workers if worker.live for name in worker.tasks})
    close = difflib.get_close_matches(task, [n for n in known if not n.startswith("fairlane.")])
    if close:
        return f"{why} (did you mean {close[0]!r}?)"
    if not known:
        return f"{why} (no worker is registered)"
    return why
