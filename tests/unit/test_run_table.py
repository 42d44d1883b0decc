"""The worker's run state machine (fairlane.worker.runs), without a database: every event in
every state, legal or not, and the slot accounting under any sequence of events."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fairlane.models import ClaimedRun
from fairlane.worker.context import RunContext
from fairlane.worker.lease_store import Lease
from fairlane.worker.run_state import (
    HOLDS_SLOT,
    OUTCOME_PENDING,
    STOP_CANCELED,
    STOP_LEASE_LOST,
    ActiveRun,
    IllegalTransition,
    RunState,
)
from fairlane.worker.runs import RunTable
from fairlane.worker.signals import TestSignals

_ids = itertools.count(1)


def new_run(run_id: int | None = None, *, payload: Any = None, attempt: int = 1) -> ActiveRun:
    run = ClaimedRun(
        id=next(_ids) if run_id is None else run_id,
        lease_token=uuid.uuid4(),
        task="t",
        payload=payload,
        attempt=attempt,
        max_attempts=3,
        environment="default",
        queue="default",
        metadata={},
        machine=None,
        max_duration_s=None,
    )
    active = ActiveRun(
        run=run,
        lease=Lease(run.id, run.lease_token),
        ctx=RunContext(run=run, worker_id="w"),
        confirmed_until=0.0,
    )
    active.ctx._active = active
    return active


def state_of(active: ActiveRun) -> RunState:
    """Its state now (read through a call, so that mypy does not keep what an earlier assert
    narrowed it to)."""
    return active.state


def finish(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that must not suspend (``resumed`` with a slot free)."""
    with pytest.raises(StopIteration):
        coroutine.send(None)


def resume_now(table: RunTable, active: ActiveRun) -> None:
    finish(table.resumed(active))


# -- one run through its states ---------------------------------------------------------------


def test_a_run_frees_its_slot_when_its_outcome_finds_room_and_is_forgotten_once_written() -> None:
    table = RunTable(2)
    active = new_run()
    table.claimed(active)
    assert (state_of(active), table.running, table.executing) == (RunState.CLAIMED, 1, 1)
    table.started(active)
    assert state_of(active) is RunState.RUNNING
    attempt = table.returned(active, started=10.0, now=10.5)
    assert (attempt.task, attempt.seconds, active.done_at) == ("t", 0.5, 10.5)
    assert active.slot_held
    assert state_of(active).name == "RETURNED"
    table.settled(active, outcome_queued=True)
    assert state_of(active) is RunState.UNWRITTEN
    assert (table.running, table.unwritten, table.executing) == (0, 1, 0)
    assert table.held == {active.run.id: active}
    table.written([active.lease])
    assert state_of(active) is RunState.RELEASED
    assert (table.running, table.unwritten, table.held) == (0, 0, {})
    assert active.ctx._active is None, "the run and its context no longer point at each other"


def test_a_run_without_an_outcome_is_released_when_its_runner_settles_it() -> None:
    table = RunTable(1)
    active = new_run()
    table.claimed(active)
    table.started(active)
    table.returned(active, 0.0, 0.0)
    table.settled(active, outcome_queued=False)
    assert state_of(active) is RunState.RELEASED
    assert (table.running, table.unwritten, table.executing, table.held) == (0, 0, 0, {})


def test_a_handler_that_never_returned_is_released_by_settled() -> None:
    """Something no handler raises (a BaseException) ended the run: nothing is written."""
    table = RunTable(1)
    active = new_run()
    table.claimed(active)
    table.started(active)
    table.settled(active, outcome_queued=True)
    assert state_of(active) is RunState.RELEASED
    assert (table.running, table.unwritten) == (0, 0)


def test_outcomes_beyond_the_room_among_the_unwritten_keep_their_slot_until_one_is_written() -> (
    None
):
    table = RunTable(1)
    first, second = new_run(), new_run()
    table.claimed(first)
    table.started(first)
    table.returned(first, 0.0, 0.0)
    table.settled(first, outcome_queued=True)
    assert (state_of(first), table.free) == (RunState.UNWRITTEN, 1)
    table.claimed(second)
    table.started(second)
    table.returned(second, 0.0, 0.0)
    table.settled(second, outcome_queued=True)
    assert (state_of(second), table.free, table.unwritten) == (RunState.PARKED, 0, 1)
    table.check()
    table.written([first.lease])
    assert (state_of(first), state_of(second)) == (RunState.RELEASED, RunState.UNWRITTEN)
    assert (table.free, table.unwritten) == (1, 1)
    table.written([second.lease])
    assert (table.free, table.unwritten, table.held) == (1, 0, {})


def test_a_waiting_handler_gives_its_slot_up_and_its_runner_is_replaced() -> None:
    needed: list[None] = []
    table = RunTable(1, on_runner_needed=lambda: needed.append(None))
    active = new_run()
    table.claimed(active)
    table.started(active)
    table.waiting(active)
    assert (state_of(active), table.free, len(needed)) == (RunState.WAITING, 1, 1)
    resume_now(table, active)
    assert (state_of(active), table.free, table.surplus_runners) == (RunState.RUNNING, 0, 1)
    assert table.take_surplus_runner()
    assert not table.take_surplus_runner()


def test_a_detached_handler_is_let_go_of_and_its_runner_is_one_too_many() -> None:
    needed: list[None] = []
    table = RunTable(1, on_runner_needed=lambda: needed.append(None))
    active = new_run()
    table.claimed(active)
    table.started(active)
    with pytest.raises(IllegalTransition):
        table.detached(active)
    table.waiting(active)
    table.detached(active)
    assert (state_of(active), table.free, table.held, table.stats.detached) == (
        RunState.RELEASED,
        1,
        {},
        1,
    )
    # The runner that took its place while it waited stays; the handler's own ends.
    assert table.take_surplus_runner()
    table.settled(active, outcome_queued=False)
    assert (state_of(active), table.executing) == (RunState.RELEASED, 0)
    table.check()


@pytest.mark.anyio
async def test_a_resuming_handler_waits_for_a_slot() -> None:
    table = RunTable(1)
    waiter, other = new_run(), new_run()
    table.claimed(waiter)
    table.started(waiter)
    table.waiting(waiter)
    table.claimed(other)  # the slot the waiter gave up
    table.started(other)
    resumed = anyio.Event()

    async def resume() -> None:
        await table.resumed(waiter)
        resumed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(resume)
        await anyio.wait_all_tasks_blocked()
        assert not resumed.is_set()
        assert state_of(waiter) is RunState.WAITING
        table.returned(other, 0.0, 0.0)
        table.settled(other, outcome_queued=False)
        with anyio.fail_after(5):
            await resumed.wait()
    assert (state_of(waiter), table.running) == (RunState.RUNNING, 1)


@pytest.mark.anyio
async def test_until_idle_returns_once_no_run_holds_a_slot() -> None:
    table = RunTable(2)
    active = new_run()
    table.claimed(active)
    table.started(active)
    async with anyio.create_task_group() as group:
        group.start_soon(table.until_idle)
        await anyio.wait_all_tasks_blocked()
        table.returned(active, 0.0, 0.0)
        table.settled(active, outcome_queued=True)  # unwritten: no slot
    await table.until_handlers_settled()
    assert table.running == 0


# -- stops -------------------------------------------------------------------------------------


def test_a_lost_lease_stops_a_running_handler_once_and_leaves_a_returned_one_alone() -> None:
    signals = TestSignals()
    table = RunTable(2)
    table.signals = signals
    running, returned = new_run(), new_run()
    for active in (running, returned):
        table.claimed(active)
        table.started(active)
    table.returned(returned, 0.0, 0.0)
    table.lease_lost(running)
    table.lease_lost(running)
    table.lease_lost(returned)
    assert running.ctx.stop_reason == STOP_LEASE_LOST
    assert running.ctx.stop_requested.is_set()
    assert returned.ctx.stop_reason is None
    assert table.stats.lost_leases == 1
    assert signals.lease_lost.history == [running.run.id]


def test_a_cancel_stops_only_a_handler_of_ours_that_runs() -> None:
    table = RunTable(2)
    active = new_run()
    table.claimed(active)
    table.started(active)
    table.cancel_requested(active.run.id + 10_000)
    table.cancel_requested(active.run.id)
    table.cancel_requested(active.run.id)
    assert active.ctx.stop_reason == STOP_CANCELED
    assert table.stats.canceled == 1


def test_a_run_claimed_again_stops_the_stale_attempt_which_touches_nothing_after() -> None:
    table = RunTable(2)
    stale = new_run()
    table.claimed(stale)
    table.started(stale)
    fresh = new_run(stale.run.id)
    table.claimed(fresh)
    assert stale.ctx.stop_reason == STOP_LEASE_LOST
    assert table.held[fresh.run.id] is fresh
    table.returned(stale, 0.0, 0.0)
    table.settled(stale, outcome_queued=False)
    assert table.held[fresh.run.id] is fresh, "the stale attempt leaves the new entry alone"
    assert (table.running, table.executing) == (1, 1)


def test_a_finished_run_claimed_again_is_let_go_of_at_once() -> None:
    table = RunTable(1)
    stale = new_run()
    table.claimed(stale)
    table.started(stale)
    table.returned(stale, 0.0, 0.0)
    table.settled(stale, outcome_queued=True)
    fresh = new_run(stale.run.id)
    table.claimed(fresh)
    assert state_of(stale) is RunState.RELEASED
    assert (table.unwritten, table.running) == (0, 1)
    table.written([stale.lease])  # refused by the fence: changes nothing
    assert table.held[fresh.run.id] is fresh
    assert state_of(fresh) is RunState.CLAIMED


def test_an_abandoned_outcome_lets_the_run_go_and_counts_a_lost_lease() -> None:
    table = RunTable(1)
    active = new_run()
    table.claimed(active)
    table.started(active)
    table.returned(active, 0.0, 0.0)
    table.abandoned(active)  # while its hooks still run: its runner settles it later
    assert (state_of(active), table.running, table.stats.lost_leases) == (RunState.RELEASED, 0, 1)
    table.returned(active, 0.0, 0.0)
    table.settled(active, outcome_queued=True)
    assert (table.running, table.unwritten, table.executing) == (0, 0, 0)


# -- every event in every state ----------------------------------------------------------------

EVENTS: dict[str, Callable[[RunTable, ActiveRun], None]] = {
    "started": RunTable.started,
    "waiting": RunTable.waiting,
    "resumed": resume_now,
    "returned": lambda table, active: table.returned(active, 0.0, 0.0) and None,
    "settled": lambda table, active: table.settled(active, outcome_queued=True),
    "abandoned": RunTable.abandoned,
}

LEGAL = {
    (RunState.CLAIMED, "started"),
    (RunState.RUNNING, "waiting"),
    (RunState.RUNNING, "returned"),
    (RunState.RUNNING, "settled"),
    (RunState.WAITING, "resumed"),
    (RunState.RETURNED, "settled"),
    (RunState.RETURNED, "abandoned"),
    (RunState.UNWRITTEN, "abandoned"),
    (RunState.PARKED, "abandoned"),
    (RunState.RELEASED, "returned"),
    (RunState.RELEASED, "settled"),
    (RunState.RELEASED, "abandoned"),
}


def run_in(state: RunState) -> tuple[RunTable, ActiveRun]:
    """A table of concurrency 1 and a run in ``state`` (a run PARKED behind an unwritten one)."""
    table = RunTable(1)
    if state is RunState.PARKED:
        ahead = new_run()
        table.claimed(ahead)
        table.started(ahead)
        table.returned(ahead, 0.0, 0.0)
        table.settled(ahead, outcome_queued=True)
    active = new_run()
    table.claimed(active)
    path = {
        RunState.CLAIMED: [],
        RunState.RUNNING: ["started"],
        RunState.WAITING: ["started", "waiting"],
        RunState.RETURNED: ["started", "returned"],
        RunState.UNWRITTEN: ["started", "returned", "settled"],
        RunState.PARKED: ["started", "returned", "settled"],
        RunState.RELEASED: ["started", "returned", "abandoned"],
    }[state]
    for event in path:
        EVENTS[event](table, active)
    assert state_of(active) is state
    return table, active


@pytest.mark.parametrize("state", list(RunState), ids=lambda state: state.name)
@pytest.mark.parametrize("event", list(EVENTS))
def test_every_event_is_legal_or_raises_in_every_state(state: RunState, event: str) -> None:
    table, active = run_in(state)
    if (state, event) in LEGAL:
        EVENTS[event](table, active)
        table.check()
    else:
        with pytest.raises(IllegalTransition, match=f"{event} is not allowed in state"):
            EVENTS[event](table, active)
        assert state_of(active) is state, "an illegal event changes nothing"


def test_a_run_is_claimed_once() -> None:
    table = RunTable(2)
    active = new_run()
    table.claimed(active)
    with pytest.raises(IllegalTransition):
        table.claimed(active)


# -- any sequence of events --------------------------------------------------------------------


class RunEvents(RuleBasedStateMachine):
    """Random events, each only where the worker can report it. Whatever happens: the slots
    taken are the runs holding one, never more than ``concurrency``; at most ``concurrency``
    outcomes are unwritten and a run parks only when they are; the runs a runner has are
    counted; a released run is not held."""

    def __init__(self) -> None:
        super().__init__()
        self.table = RunTable(1)
        self.runs: list[ActiveRun] = []  # every run ever claimed, superseded ones included
        self.with_runner: set[int] = set()

    def in_state(self, *states: RunState) -> list[ActiveRun]:
        return [active for active in self.runs if active.state in states]

    def one(self, pick: int, *states: RunState) -> ActiveRun:
        found = self.in_state(*states)
        return found[pick % len(found)]

    @initialize(concurrency=st.integers(min_value=1, max_value=3))
    def start_table(self, concurrency: int) -> None:
        self.table = RunTable(concurrency)

    @precondition(lambda self: self.table.free > 0)
    @rule(pick=st.integers(0, 50), again=st.booleans())
    def claim(self, pick: int, again: bool) -> None:
        held = list(self.table.held)
        # Now and then the database hands back a run this worker still holds.
        run_id = held[pick % len(held)] if again and held else None
        active = new_run(run_id)
        self.table.claimed(active)
        self.runs.append(active)
        self.with_runner.add(id(active))

    @precondition(lambda self: self.in_state(RunState.CLAIMED))
    @rule(pick=st.integers(0, 50))
    def start(self, pick: int) -> None:
        self.table.started(self.one(pick, RunState.CLAIMED))

    @precondition(lambda self: self.in_state(RunState.RUNNING))
    @rule(pick=st.integers(0, 50))
    def wait(self, pick: int) -> None:
        self.table.waiting(self.one(pick, RunState.RUNNING))

    @precondition(lambda self: self.in_state(RunState.WAITING) and self.table.free > 0)
    @rule(pick=st.integers(0, 50))
    def resume(self, pick: int) -> None:
        resume_now(self.table, self.one(pick, RunState.WAITING))

    @precondition(lambda self: self.in_state(RunState.RUNNING))
    @rule(pick=st.integers(0, 50))
    def handler_returns(self, pick: int) -> None:
        self.table.returned(self.one(pick, RunState.RUNNING), 0.0, 0.0)

    def settleable(self) -> list[ActiveRun]:
        done = self.in_state(RunState.RETURNED, RunState.RELEASED)
        return [active for active in done if id(active) in self.with_runner]

    @precondition(lambda self: self.settleable())
    @rule(pick=st.integers(0, 50), queued=st.booleans())
    def settle(self, pick: int, queued: bool) -> None:
        candidates = self.settleable()
        active = candidates[pick % len(candidates)]
        self.table.settled(active, outcome_queued=queued)
        self.with_runner.discard(id(active))

    @precondition(lambda self: self.in_state(RunState.UNWRITTEN, RunState.PARKED))
    @rule(pick=st.integers(0, 50))
    def write(self, pick: int) -> None:
        active = self.one(pick, RunState.UNWRITTEN, RunState.PARKED)
        self.table.written([active.lease])

    @precondition(lambda self: self.in_state(*OUTCOME_PENDING, RunState.RETURNED))
    @rule(pick=st.integers(0, 50))
    def abandon(self, pick: int) -> None:
        self.table.abandoned(self.one(pick, *OUTCOME_PENDING, RunState.RETURNED))

    @precondition(lambda self: self.in_state(RunState.CLAIMED, RunState.RUNNING))
    @rule(pick=st.integers(0, 50))
    def lose_lease(self, pick: int) -> None:
        self.table.lease_lost(self.one(pick, RunState.CLAIMED, RunState.RUNNING))

    @invariant()
    def slots_add_up(self) -> None:
        table, concurrency = self.table, self.table.concurrency
        holding = sum(active.state in HOLDS_SLOT for active in self.runs)
        assert table.running == holding <= concurrency
        assert table.unwritten == len(self.in_state(RunState.UNWRITTEN)) <= concurrency
        if self.in_state(RunState.PARKED):
            assert table.unwritten == concurrency
        assert table.executing == len(self.with_runner)
        released = self.in_state(RunState.RELEASED)
        assert all(table.held.get(active.run.id) is not active for active in released)


RunEvents.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
test_the_slot_accounting_holds_under_any_sequence_of_events = RunEvents.TestCase
