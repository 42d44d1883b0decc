"""Each run's cancel scope is made from the running backend's class, taken once per worker:
it must be an anyio scope that deadlines and cancels like one."""

from __future__ import annotations

import anyio
import pytest

from fairlane.worker.executor import cancel_scopes

pytestmark = pytest.mark.anyio


async def test_the_scope_is_an_anyio_scope_its_deadline_cuts() -> None:
    new_scope = cancel_scopes()
    scope = new_scope()
    assert isinstance(scope, anyio.CancelScope)
    scope.deadline = anyio.current_time() + 0.01
    with scope:
        await anyio.sleep(30)
    assert scope.cancelled_caught


async def test_each_call_makes_a_new_scope_that_cancel_cuts() -> None:
    new_scope = cancel_scopes()
    first, second = new_scope(), new_scope()
    assert first is not second
    with second:
        second.cancel()
        await anyio.sleep(30)
    assert second.cancelled_caught
    assert not first.cancel_called
