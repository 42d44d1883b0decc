"""Chaos: real ``fairlane worker`` processes against a throwaway cluster that is restarted,
crashed, frozen and has its connections cut, while a handler writes a ledger of every
execution. Each scenario asserts the ledger's verdict (tests/chaos/harness.py: nothing lost,
every run final, duplicates only after a killed or stopped worker, no handler more than 1 s
past its lease deadline) and prints its figures. ``make chaos``; CI runs it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import anyio
import pytest

from fairlane import AsyncClient, Client, DatabaseUnavailable
from fairlane.connection import ABORT_GRACE_S
from tests.chaos.harness import (
    Fleet,
    all_runs,
    backend_of,
    completed,
    drained,
    read,
    trigger_runs,
    until_progress,
)
from tests.chaos.verdict import orphans_restarted_after, report, verdict
from tests.helpers import poll
from tests.helpers.cluster import Cluster
from tests.helpers.faults import stopped_between_statements

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

SEED = 20240917
DRAIN_WITHIN_S = 150.0


def finish(dsn: str, run_ids: list[int], fleet: Fleet, scenario: str, **recoveries: object) -> None:
    """Wait for every run to be final, stop the workers, and judge the ledger. Every run of the
    database is judged: those the scenario triggered, and any made by a call that failed
    after its statement went out (``DatabaseUnavailable.sent``)."""
    poll(lambda: drained(dsn, all_runs(dsn)), within=DRAIN_WITHIN_S, what="every run final")
    fleet.stop_all()
    everything = all_runs(dsn)
    assert set(run_ids) <= set(everything), "triggered runs are missing"
    result = verdict(dsn, everything, fleet)
    print("\n" + report(scenario, result, fleet, **recoveries))  # type: ignore[arg-type]
    assert not result.problems, result.problems[:20]
    assert not fleet.tracebacks(), fleet.tracebacks()


def at_fraction(dsn: str, total: int, fraction: float) -> None:
    poll(lambda: completed(dsn) >= total * fraction, within=DRAIN_WITHIN_S, what=f"{fraction:.0%}")


def test_sigkill_random_workers_during_a_drain(
    chaos_dsn: str, make_fleet: Callable[..., Fleet]
) -> None:
    """Five times during a drain of 1,200 runs a random worker is killed (SIGKILL) and a new
    one started. Its runs wait out their lease (3 s) and are run again elsewhere: the recovery
    is from the kill to the last of its runs started again."""
    rng = random.Random(SEED)
    run_ids = trigger_runs(chaos_dsn, 1200, seconds=(0.05, 0.4), seed=SEED)
    fleet = make_fleet(lease_seconds=3)
    fleet.start(3)
    kills: list[tuple[int, float]] = []
    for fraction in (0.1, 0.25, 0.4, 0.55, 0.7):
        at_fraction(chaos_dsn, len(run_ids), fraction)
        victim = rng.choice(fleet.alive())
        kills.append((victim.pid, fleet.kill(victim)))
        fleet.start(1)
    poll(lambda: drained(chaos_dsn, run_ids), within=DRAIN_WITHIN_S, what="every run final")
    recoveries = [orphans_restarted_after(chaos_dsn, pid, at) for pid, at in kills]
    finish(chaos_dsn, run_ids, fleet, "SIGKILL workers", rerun=recoveries)


def test_server_restarts_fast_and_immediate(
    chaos_dsn: str, cluster: Cluster, make_fleet: Callable[..., Fleet]
) -> None:
    """The server is restarted during a drain, first in fast mode (sessions terminated, a
    checkpoint), then in immediate mode (a crash: recovery from the WAL at start). Leases of
    10 s outlast either; the recovery is from the restart until runs complete again."""
    run_ids = trigger_runs(chaos_dsn, 900, seconds=(0.05, 0.3), seed=SEED + 1)
    fleet = make_fleet(lease_seconds=10)
    fleet.start(3)
    downtime: list[float] = []
    recovered: list[float] = []
    for fraction, mode in ((0.25, "fast"), (0.6, "immediate")):
        at_fraction(chaos_dsn, len(run_ids), fraction)
        fault = time.monotonic()
        downtime.append(cluster.restart(mode))
        recovered.append(until_progress(chaos_dsn, fault))
    finish(
        chaos_dsn,
        run_ids,
        fleet,
        "restarts fast/immediate",
        restart=downtime,
        completing_again=recovered,
    )


LOOPS = ("claim", "heartbeat", "writer", "listener", "periodic")


def test_terminate_each_connection_kind(chaos_dsn: str, make_fleet: Callable[..., Fleet]) -> None:
    """During a drain, every worker's connection of one kind is terminated
    (pg_terminate_backend), one kind after the other; the recovery is until every worker has
    that connection again."""
    run_ids = trigger_runs(chaos_dsn, 900, seconds=(0.05, 0.3), seed=SEED + 2)
    fleet = make_fleet(lease_seconds=10)
    workers = len(fleet.start(3))
    recovered: list[float] = []
    for n, loop in enumerate(LOOPS):
        at_fraction(chaos_dsn, len(run_ids), 0.1 + 0.12 * n)
        name = f"fairlane {loop}"
        before = backends_named(chaos_dsn, name)
        read(
            chaos_dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (name,),
        )

        def all_back(name: str = name, before: set[int] = before) -> bool:
            return len(backends_named(chaos_dsn, name) - before) >= workers

        recovered.append(poll(all_back, within=30, what=f"every worker's {loop} connection"))
    figures = dict(zip(LOOPS, recovered, strict=True))
    finish(chaos_dsn, run_ids, fleet, "terminate connections", **figures)


def backends_named(dsn: str, application_name: str) -> set[int]:
    rows = read(
        dsn, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    )
    return {pid for (pid,) in rows}


def test_sigstop_the_heartbeat_then_the_writer_backend(
    chaos_dsn: str, make_fleet: Callable[..., Fleet]
) -> None:
    """One worker's heartbeat backend is stopped (SIGSTOP) for 5 s, later its writer's, each
    between two statements: the worker abandons the hung connection and goes on with a new
    one. (A backend stopped inside a statement can hold a lock of the server's own that every
    worker's heartbeat then waits for; no worker can tell that from a hung server.) A lease of
    2.5 s is shorter than a beat may hang before it is abandoned (at least 1 s, plus the 1 s
    grace), so leases lapse meanwhile: the worker's own lease clock stops those handlers, and
    the runs are run again. Only that worker's runs may run twice. The recovery is until its
    replacement connection is up."""
    # Handlers of up to 5 s: longer ones need beats to keep their lease.
    run_ids = trigger_runs(chaos_dsn, 160, seconds=(0.2, 5.0), seed=SEED + 3)
    fleet = make_fleet(lease_seconds=2.5)
    target, _ = fleet.start(2)
    fleet.excused.add(target.pid)
    recovered: list[float] = []
    for fraction, loop in ((0.2, "heartbeat"), (0.5, "writer")):
        at_fraction(chaos_dsn, len(run_ids), fraction)

        def current(loop: str = loop) -> int | None:
            return backend_of(chaos_dsn, target, loop)

        poll(lambda: current() is not None, within=10, what=f"the {loop} connection")
        frozen = current()
        assert frozen is not None
        with stopped_between_statements(chaos_dsn, frozen):
            started = time.monotonic()

            def replaced(frozen: int = frozen) -> bool:
                return current() not in (None, frozen)

            recovered.append(poll(replaced, within=15, what=f"a new {loop} connection"))
            # The worker's next statement on the stopped connection hangs until it gives up on
            # it; the backend stays stopped for the rest of the 5 s all the same.
            time.sleep(max(0.0, STOPPED_FOR_S - (time.monotonic() - started)))
    finish(chaos_dsn, run_ids, fleet, "SIGSTOP heartbeat/writer", replaced=recovered)


STOPPED_FOR_S = 5.0
# The clients' timeouts while the server is frozen, and the scheduling noise allowed on top.
CONNECT_TIMEOUT_S = 2.0
STATEMENT_TIMEOUT_S = 2.0
CALL_SLACK_S = 1.0


def test_client_calls_fail_within_their_timeouts_while_the_server_is_frozen(
    chaos_dsn: str, cluster: Cluster, make_fleet: Callable[..., Fleet]
) -> None:
    """The whole server is stopped (SIGSTOP: it accepts TCP connections and answers nothing)
    during a drain. ``Client.trigger`` on a pooled connection and on a new client, and
    ``AsyncClient.trigger``, each fail with ``DatabaseUnavailable`` within their timeouts; the
    workers (15 s leases) go on once the server does."""
    run_ids = trigger_runs(chaos_dsn, 500, seconds=(0.05, 0.3), seed=SEED + 4)
    fleet = make_fleet(lease_seconds=15)
    fleet.start(2)
    bound = max(CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S + ABORT_GRACE_S)
    payload = {"n": -1, "seconds": 0.01}
    took: dict[str, float] = {}
    with client(chaos_dsn) as pooled, client(chaos_dsn) as fresh:
        run_ids.append(pooled.trigger("chaos.work", payload))
        at_fraction(chaos_dsn, len(run_ids), 0.2)
        frozen = cluster.freeze()
        try:
            for name, caller in (("pooled", pooled), ("new", fresh)):
                started = time.monotonic()
                with pytest.raises(DatabaseUnavailable):
                    caller.trigger("chaos.work", payload)
                took[name] = time.monotonic() - started
            took["async"] = anyio.run(async_trigger_fails, chaos_dsn, payload)
        finally:
            cluster.thaw(frozen)
        thawed = time.monotonic()
        poll(lambda: triggers(pooled, payload), within=30, what="a trigger after the thaw")
        trigger_again = time.monotonic() - thawed
    completing_again = until_progress(chaos_dsn, thawed)
    print(
        "\nchaos frozen server: trigger failed after "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in took.items())
        + f" (bound {bound:g} s + {CALL_SLACK_S:g} s)"
    )
    assert all(seconds <= bound + CALL_SLACK_S for seconds in took.values()), took
    finish(
        chaos_dsn,
        run_ids,
        fleet,
        "frozen server",
        trigger_again=trigger_again,
        completing_again=completing_again,
    )


def client(dsn: str) -> Client:
    return Client(dsn, connect_timeout=CONNECT_TIMEOUT_S, statement_timeout=STATEMENT_TIMEOUT_S)


async def async_trigger_fails(dsn: str, payload: object) -> float:
    async with AsyncClient(
        dsn, connect_timeout=CONNECT_TIMEOUT_S, statement_timeout=STATEMENT_TIMEOUT_S
    ) as caller:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable):
            await caller.trigger("chaos.work", payload)
        return time.monotonic() - started


def triggers(caller: Client, payload: object) -> bool:
    try:
        caller.trigger("chaos.work", payload)
    except DatabaseUnavailable:
        return False
    return True
