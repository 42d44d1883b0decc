"""The switch eager mode turns (``fairlane.testing.eager``, for unit tests).

While an eager block is open, the public trigger calls (``fairlane.trigger``/``trigger_many``
and their async twins, ``Client``/``AsyncClient.trigger``/``trigger_many``, a task handle's
``trigger``) hand their requests to it instead of the database, and the clients' ``get_run`` and
``wait_for_run`` read its runs (their ids are negative, so they never collide with a stored
run's). The worker's own triggers (children, schedule ticks, batch items) and the HTTP API
always go to the database (``insert_runs``).

The switch is process-wide, not per thread or task: code under test that triggers from a
thread of its own (a web framework's test client) is eager too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from fairlane.models import Run
    from fairlane.triggering.request import TriggerRequest


class EagerTriggers(Protocol):
    def trigger_many(self, requests: Sequence[TriggerRequest]) -> list[int]: ...

    async def trigger_many_async(self, requests: Sequence[TriggerRequest]) -> list[int]: ...

    def get_run(self, run_id: int) -> Run | None:
        """The eager run with this id, or None when it is not one of them."""


_open: list[EagerTriggers] = []
_lock = threading.Lock()


def active() -> EagerTriggers | None:
    """The innermost open eager block, or None (the database)."""
    opened = _open
    return opened[-1] if opened else None


def switch_on(mode: EagerTriggers) -> None:
    with _lock:
        _open.append(mode)


def switch_off(mode: EagerTriggers) -> None:
    with _lock:
        for index in range(len(_open) - 1, -1, -1):
            if _open[index] is mode:
                del _open[index]
                return


def eager_run(run_id: int) -> Run | None:
    """The eager run with this id while eager mode is on, else None (read the database)."""
    if run_id >= 0:
        return None
    mode = active()
    return mode.get_run(run_id) if mode is not None else None
