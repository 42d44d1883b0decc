"""The sync code generated from its async source (tools/async_to_sync.py) is current, and no
module of the package writes a sync twin by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tools.async_to_sync import (
    MODULES,
    PACKAGE,
    ROOT,
    SECTION_END,
    SECTION_START,
    SECTION_SYNC,
    convert,
    convert_sections,
    generate,
    generate_sections,
    section_modules,
    sync_name,
)

# Twins that are two mechanisms, not two spellings of one: a sync connection's deadline is a
# watchdog thread's, an async one's a timer of the running event loop.
DIFFERENT_MECHANISMS = {("queue/fairlane/connection/deadline.py", "bounded")}


@pytest.mark.parametrize(("source", "target"), sorted(MODULES.items()))
def test_generated_module_is_current(source: str, target: str) -> None:
    checked_in = (ROOT / target).read_text()
    assert checked_in == generate(source, target), (
        f"{target} is not what tools/async_to_sync.py makes of {source}: run `make generate`"
    )


@pytest.mark.parametrize("path", section_modules())
def test_generated_sections_are_current(path: str) -> None:
    assert (ROOT / path).read_text() == generate_sections(path), (
        f"the sync sections of {path} are not what tools/async_to_sync.py makes of its async"
        " sections: run `make generate`"
    )


def _scopes(tree: ast.Module) -> list[list[ast.stmt]]:
    """The module's body and every class body in it."""
    return [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def _generated_lines(text: str) -> set[int]:
    """The line numbers (from 1) inside the module's generated sync sections."""
    inside, lines = False, set()
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip().startswith(SECTION_SYNC):
            inside = True
        elif line.strip().startswith(SECTION_END):
            inside = False
        elif inside:
            lines.add(number)
    return lines


def _declared(node: ast.stmt) -> bool:
    """A method declared, not written (a protocol's ``...``)."""
    body = getattr(node, "body", [])
    only = body[0] if len(body) == 1 else None
    return (
        isinstance(only, ast.Expr)
        and isinstance(only.value, ast.Constant)
        and only.value.value is Ellipsis
    )


def _hand_written_twins(path: Path) -> list[str]:
    """The sync twins of ``path`` written by hand: a plain ``x`` (or class ``X``) beside an
    ``x_async`` (``AsyncX``) that it neither comes from (a generated section) nor calls."""
    text = path.read_text()
    generated = _generated_lines(text)
    found = []
    for body in _scopes(ast.parse(text)):
        named = {
            node.name: node
            for node in body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        for name in named:
            twin = named.get(sync_name(name)) if sync_name(name) != name else None
            if twin is None or twin.lineno in generated or _declared(twin):
                continue
            calls = {node.id for node in ast.walk(twin) if isinstance(node, ast.Name)}
            calls |= {node.attr for node in ast.walk(twin) if isinstance(node, ast.Attribute)}
            relative = path.relative_to(ROOT).as_posix()
            if name not in calls and (relative, twin.name) not in DIFFERENT_MECHANISMS:
                found.append(f"{relative}:{twin.lineno} {twin.name} (twin of {name})")
    return found


def test_no_sync_twin_is_written_by_hand() -> None:
    targets = {ROOT / target for target in MODULES.values()}
    modules = sorted(set((ROOT / PACKAGE).rglob("*.py")) - targets)
    twins = [twin for path in modules for twin in _hand_written_twins(path)]
    assert not twins, (
        "sync twins written by hand (write the async once, in a section of its own, and run"
        f" `make generate`; README, 'Sync and async'): {twins}"
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


def test_a_section_in_a_class_is_made_at_its_indentation() -> None:
    source = (
        "class Task:\n"
        f"    {SECTION_START}\n"
        "    async def trigger_async(self, conn: AsyncConn) -> int:\n"
        "        return await insert_runs_async(conn)\n"
        f"    {SECTION_SYNC}\n"
        "    def stale(self) -> None: ...\n"
        f"    {SECTION_END}\n"
        "    def after(self) -> None: ...\n"
    )
    lines = [line for line in convert_sections(source, "task.py").splitlines() if line.strip()]
    assert lines[5:] == [
        "    def trigger(self, conn: Conn) -> int:",
        "        return insert_runs(conn)",
        f"    {SECTION_END}",
        "    def after(self) -> None: ...",
    ]


def test_a_section_without_its_end_is_refused() -> None:
    source = f"{SECTION_START}\nasync def a_async() -> None: ...\n{SECTION_SYNC}\n"
    with pytest.raises(ValueError, match="not closed"):
        convert_sections(source, "broken.py")
