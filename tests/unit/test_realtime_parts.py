"""The realtime parts that need no server: an inbox's bound, a token's signature and expiry,
the events a change makes."""

from __future__ import annotations

import dataclasses
import time

import anyio
import pytest

from fairlane.models import Run, RunStatus
from fairlane.web.errors import ApiError
from fairlane.web.realtime.inbox import Inbox, Scope
from fairlane.web.realtime.stream import Follow, differences
from fairlane.web.realtime.tokens import issue, lifetime, verify

pytestmark = pytest.mark.anyio
SECRET = b"s" * 32


async def test_an_inbox_past_its_bound_forgets_its_ids_and_asks_for_a_resync() -> None:
    inbox = Inbox(Scope("tag", "t", "env-a"), limit=3)
    for run_id in (1, 2, 2, 3):
        inbox.put(run_id)
    taken = inbox.take()
    assert (taken.ids, taken.resync) == (frozenset({1, 2, 3}), False)
    assert not await inbox.wait(0.01)
    for run_id in range(10, 20):
        inbox.put(run_id)
    assert await inbox.wait(0)
    taken = inbox.take()
    assert (taken.ids, taken.resync) == (frozenset(), True)


async def test_a_waiting_stream_wakes_on_a_put() -> None:
    inbox = Inbox(Scope("run", 1, None))
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await inbox.wait(30))

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert woke == []
        inbox.put(1)
    assert woke == [True]
    assert inbox.take().ids == frozenset({1})


def test_a_token_carries_its_scope_and_refuses_forgery_and_expiry() -> None:
    scope = Scope("batch", 12, "env-a")
    token = issue(SECRET, scope, 60).token
    assert verify(SECRET, token) == scope
    for bad in (token[:-1] + ("0" if token[-1] != "0" else "1"), token + "é", "flrt_x.y"):
        with pytest.raises(ApiError) as refused:
            verify(SECRET, bad)
        assert refused.value.status == 401
    with pytest.raises(ApiError, match="expired"):
        verify(SECRET, issue(SECRET, scope, 1, now=time.time() - 5).token)
    with pytest.raises(ApiError):
        verify(b"t" * 32, token)


@pytest.mark.parametrize("value", [0, -1, 10**6, float("nan"), "60", True, 10**400])
def test_a_lifetime_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(ApiError) as refused:
        lifetime(value)
    assert refused.value.status == 422


def _run(status: RunStatus, metadata: dict[str, object]) -> Run:
    fields: dict[str, object] = {
        field.name: None
        for field in dataclasses.fields(Run)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    }
    fields.update(
        id=7,
        environment="env-a",
        queue="q",
        task="t",
        payload={},
        status=status,
        priority=0,
        attempts=1,
        max_attempts=3,
        tags=(),
        metadata=metadata,
    )
    return Run(**fields)  # type: ignore[arg-type]


def test_a_change_of_status_and_metadata_is_one_event_each_and_the_end_a_result() -> None:
    follow = Follow(None, Scope("run", 7, None))  # type: ignore[arg-type]
    first = list(follow.events([_run(RunStatus.QUEUED, {})]))
    assert [text.split("\n")[0] for text in first] == ["event: run"]
    assert list(follow.events([_run(RunStatus.QUEUED, {})])) == []
    moved = list(follow.events([_run(RunStatus.EXECUTING, {"step": 1})]))
    assert [text.split("\n")[0] for text in moved] == ["event: status", "event: metadata"]
    done = list(follow.events([_run(RunStatus.COMPLETED, {"step": 1})]))
    assert [text.split("\n")[0] for text in done] == ["event: status", "event: result"]
    assert [t.split("\n")[0] for t in differences(None, _run(RunStatus.FAILED, {}))] == [
        "event: run",
        "event: result",
    ]
