"""The sync modules generated from their async sources (tools/async_to_sync.py) are current."""

from __future__ import annotations

import pytest
from tools.async_to_sync import MODULES, ROOT, convert, generate, sync_name


@pytest.mark.parametrize(("source", "target"), sorted(MODULES.items()))
def test_generated_module_is_current(source: str, target: str) -> None:
    checked_in = (ROOT / target).read_text()
    assert checked_in == generate(source, target), (
        f"{target} is not what tools/async_to_sync.py makes of {source}: run `make generate`"
    )


def test_names_follow_the_convention() -> None:
    assert sync_name("AsyncClient") == "Client"
    assert sync_name("drive_async") == "drive"
    assert sync_name("__aexit__") == "__exit__"
    # Neither an Async prefix nor an _async suffix: unchanged.
    assert sync_name("Asynchronous") == "Asynchronous"
    assert sync_name("async_client") == "async_client"


def test_conversion_drops_async_and_unwraps_shields() -> None:
    source = (
        "import anyio\n\n\n"
        "async def put(pool: AsyncPool, conn: Awaitable[list[int]]) -> None:\n"
        "    # Shielded: why.\n"
        "    with anyio.CancelScope(shield=True):  # sync: unwrap, with the comment above\n"
        "        await pool.putconn_async(conn)\n"
        "    await anyio.sleep(1)\n"
    )
    converted = convert(source, "queue/fairlane/async_client.py")
    assert converted.splitlines()[1:] == [
        "import threading",
        "",
        "",
        "def put(pool: Pool, conn: list[int]) -> None:",
        "    pool.putconn(conn)",
        "    time.sleep(1)",
    ]
