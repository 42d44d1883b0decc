"""Clients across a real server outage: the server of the chaos cluster is stopped, a client
is used while it is down (each call fails within its connect timeout), and once the server is
started again the first call succeeds. ``make chaos``."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from fairlane import AsyncClient, Client, DatabaseUnavailable
from tests.helpers.cluster import Cluster

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

# Long enough for psycopg_pool's reconnect backoff (attempts 1, 2, 4, 8 s apart) to have put
# its next attempt seconds past the restart.
OUTAGE_S = 8.0
CONNECT_TIMEOUT_S = 2.0
SLACK_S = 1.0


def down_for(cluster: Cluster, seconds: float, call: Callable[[], object]) -> list[float]:
    """Stop the server (fast), make ``call`` fail again and again for ``seconds``, start the
    server again; returns how long each failed call took."""
    cluster.stop("fast")
    took = []
    try:
        down_at = time.monotonic()
        while time.monotonic() - down_at < seconds:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable):
                call()
            took.append(time.monotonic() - started)
    finally:
        cluster.start()
    return took


def test_a_client_used_during_an_outage_serves_the_first_call_after_a_restart(
    chaos_dsn: str, cluster: Cluster
) -> None:
    with Client(chaos_dsn, connect_timeout=CONNECT_TIMEOUT_S) as client:
        client.trigger("chaos.nobody")
        took = down_for(cluster, OUTAGE_S, client.count_by_status)
        started = time.monotonic()
        run_id = client.trigger("chaos.nobody")
        first_call = time.monotonic() - started
        assert client.get_run(run_id).task == "chaos.nobody"
    failed = f"{len(took)} calls failed within {max(took):.2f} s each"
    print(f"\nchaos client outage: {failed}; the first call after took {first_call:.2f} s")
    assert max(took) <= CONNECT_TIMEOUT_S + SLACK_S
    assert first_call < CONNECT_TIMEOUT_S


def test_an_async_client_used_during_an_outage_serves_the_first_call_after_a_restart(
    chaos_dsn: str, cluster: Cluster
) -> None:
    async def scenario() -> None:
        async with AsyncClient(chaos_dsn, connect_timeout=CONNECT_TIMEOUT_S) as client:
            await client.trigger("chaos.nobody")
            cluster.stop("fast")
            try:
                down_at = time.monotonic()
                while time.monotonic() - down_at < OUTAGE_S:
                    with pytest.raises(DatabaseUnavailable):
                        await client.count_by_status()
            finally:
                cluster.start()
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                await client.trigger("chaos.nobody")

    anyio.run(scenario)
