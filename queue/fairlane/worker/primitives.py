"""The anyio events and cancel scopes a worker makes per run, made from the running backend's
own classes.

``anyio.Event()`` and ``anyio.CancelScope()`` look the running backend up again on every call
(sniffio, then the backend module), several times what making one from the backend's class
costs (bench/sittings/04-the-worker-s-python-per-run-binary-arrays-claims-of-1-000.md). A
no-op run needs an event for the runner that waits for it and another for the slot it frees;
each runner a scope, made again after a stop cancels it (worker/executor.py). The classes are
taken once, inside the event loop, when the worker starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio


@dataclass(frozen=True, slots=True)
class Primitives:
    new_event: Callable[[], anyio.Event]
    new_scope: Callable[[], anyio.CancelScope]


# Until a worker's loop starts: anyio's own constructors, which work anywhere.
GENERIC = Primitives(anyio.Event, anyio.CancelScope)


def of_running_backend() -> Primitives:
    """The running backend's classes; call from inside its event loop."""
    return Primitives(type(anyio.Event()), type(anyio.CancelScope()))
