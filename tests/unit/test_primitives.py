"""A worker's per-run events and cancel scopes come from the running backend's classes, taken
once: they must be anyio events and scopes that behave as such."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import TaskStatus

from fairlane.worker.primitives import of_running_backend

pytestmark = pytest.mark.anyio


async def test_a_scope_is_an_anyio_scope_its_deadline_cuts() -> None:
    scope = of_running_backend().new_scope()
    assert isinstance(scope, anyio.CancelScope)
    scope.deadline = anyio.current_time() + 0.01
    with scope:
        await anyio.sleep(30)
    assert scope.cancelled_caught


async def test_each_scope_is_new_and_cancel_cuts_only_its_own() -> None:
    primitives = of_running_backend()
    first, second = primitives.new_scope(), primitives.new_scope()
    assert first is not second
    with second:
        second.cancel()
        await anyio.sleep(30)
    assert second.cancelled_caught
    assert not first.cancel_called


async def test_an_event_wakes_its_waiter_and_counts_it_while_it_waits() -> None:
    event = of_running_backend().new_event()
    assert isinstance(event, anyio.Event)
    woken: list[bool] = []

    async def waiter(*, task_status: TaskStatus[None]) -> None:
        # Reports started, then reaches wait() before the starter resumes.
        task_status.started()
        await event.wait()
        woken.append(True)

    async with anyio.create_task_group() as group:
        await group.start(waiter)
        assert event.statistics().tasks_waiting == 1
        event.set()
    assert woken == [True]
