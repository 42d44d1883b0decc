"""Generate fairlane's sync code from its async source.

The async code is written once; its sync twin is this script's output, checked in, and
``tests/unit/test_generated_sync.py`` fails when a checked-in file is not what the script
makes of its source (run ``make generate`` after changing a source). Two shapes:

- a whole module (``MODULES``: ``async_client.py`` → ``client.py``), for a class whose sync
  twin is a module of its own;
- a section of a module (``SECTION_START`` ... ``SECTION_SYNC`` ... ``SECTION_END``), for
  the functions of a module that offers both spellings under one import path
  (``fairlane.limits.set_queue`` / ``set_queue_async``): the async section is the source, the
  sync section after it is generated. Every module under ``queue/`` holding a marker is
  found, so a new one needs no registration here.

The conversion works on tokens, so the comments and docstrings stay where they are:

- ``async def``, ``async with``, ``async for`` lose ``async``; ``await`` goes;
- a name in ``NAMES`` becomes its sync name, else a name ``AsyncX`` becomes ``X`` and a name
  ``x_async`` becomes ``x`` (the naming convention: README, "Sync and async"), in code and in
  the words of strings and comments (but for ``KEEP_IN_TEXT`` in docstrings and comments);
- ``Awaitable[T]`` becomes ``T``; ``# noqa: ASYNC...`` comments go;
- a line ending ``# sync: unwrap`` (a ``with`` that only async code needs, such as a cancel
  shield) goes and its block is dedented one level; ``# sync: unwrap, with the comment
  above`` also drops the comment lines just above it;
- an import from a module of ``MODULES`` imports from its generated twin; ``IMPORTS`` maps
  whole import lines whose sync names live in another module, ``LITERALS`` the few strings
  that differ.

Then ruff sorts the imports, drops the unused ones and formats the file (a module with sections
is only formatted: its imports are written by hand, for both sections). Every generated file
starts with a comment naming its source.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Async source → generated sync module, relative to the repository's root.
MODULES = {
    "queue/fairlane/async_client.py": "queue/fairlane/client.py",
    "queue/fairlane/async_namespaces.py": "queue/fairlane/namespaces.py",
}

# Names whose sync twin is not the plain rule's.
NAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
}

# Dotted names mapped before the name rules: anyio's primitives and their threading or time
# equivalents.
DOTTED = {
    "anyio.Lock": "threading.Lock",
    "anyio.Event": "threading.Event",
    "anyio.current_time": "time.monotonic",
    "anyio.sleep": "time.sleep",
}

# Whole import lines whose sync names live elsewhere (or, mapped to nothing, are imported at the
# top of the module already: SQLAlchemy's asyncio classes, imported where they are used).
IMPORTS = {
    "import anyio": "import threading",
    "from sqlalchemy.ext.asyncio import AsyncConnection as AsyncSAConnection": "",
    "from sqlalchemy.ext.asyncio import AsyncSession": "",
}

# Names that a docstring or comment keeps (a module's docstring names both clients).
KEEP_IN_TEXT = {"AsyncClient"}

# Literal texts with a sync spelling of their own.
LITERALS = {'"fairlane-async-client"': '"fairlane-client"'}

HEADER = "# Generated from {source} by tools/async_to_sync.py: do not edit.\n"
# The lines that frame a generated section (indented as the code they frame).
SECTION_START = "# -- async, written once: the sync section below is generated from it"
SECTION_SYNC = "# -- sync, generated from the async section above by tools/async_to_sync.py"
SECTION_END = "# -- end of the generated sync section"
PACKAGE = "queue"
UNWRAP = "# sync: unwrap"
UNWRAP_COMMENTED = "# sync: unwrap, with the comment above"
NOQA_ASYNC = re.compile(r"\s*# noqa: ASYNC\d+[^\n]*")
DOTTED_PATTERN = re.compile(r"\b(" + "|".join(re.escape(name) for name in DOTTED) + r")\b")


def sync_name(name: str) -> str:
    if name in NAMES:
        return NAMES[name]
    if name.startswith("Async") and len(name) > 5 and name[5].isupper():
        return name[5:]
    if name.endswith("_async") and len(name) > 6:
        return name[:-6]
    return name


def _words(text: str, *, keep: bool = True) -> str:
    """The name rules applied to the words of a docstring or comment (which keep the names
    of ``KEEP_IN_TEXT``) or of a string."""

    def replace(found: re.Match[str]) -> str:
        word = found.group(0)
        return word if keep and word in KEEP_IN_TEXT else sync_name(word)

    return re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b", replace, text)


def _drop_awaitable(text: str) -> str:
    """``Awaitable[X]`` → ``X``, brackets inside ``X`` included."""
    while (start := text.find("Awaitable[")) != -1:
        depth, end = 0, start + len("Awaitable")
        while end < len(text):
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        text = text[:start] + text[start + len("Awaitable[") : end] + text[end + 1 :]
    return text


def _unwrap(lines: list[str]) -> list[str]:
    """Drop every ``# sync: unwrap`` line and dedent its block by one level."""
    kept: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if UNWRAP not in line:
            kept.append(line)
            index += 1
            continue
        if UNWRAP_COMMENTED in line:
            while kept and kept[-1].strip().startswith("#"):
                kept.pop()
        indent = len(line) - len(line.lstrip())
        index += 1
        while index < len(lines) and (
            not lines[index].strip() or len(lines[index]) - len(lines[index].lstrip()) > indent
        ):
            kept.append(lines[index][4:] if lines[index].strip() else lines[index])
            index += 1
    return kept


def _tokens(source: str) -> str:
    """``async``/``await`` dropped (with the space after), names mapped, and the words of
    strings and comments mapped; everything else, spacing included, as it was."""
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        begin = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]
        if token.type == tokenize.NAME and token.string in ("async", "await"):
            edits.append((begin, end + (source[end : end + 1] == " "), ""))
        elif token.type == tokenize.NAME:
            edits.append((begin, end, sync_name(token.string)))
        elif token.type == tokenize.COMMENT or token.string.startswith(('"""', "'''")):
            edits.append((begin, end, _words(token.string)))
        elif token.type == tokenize.STRING:
            edits.append((begin, end, _words(token.string, keep=False)))
    for begin, end, text in reversed(edits):
        source = source[:begin] + text + source[end:]
    return source


def _module(path: str) -> str:
    return path.removeprefix("queue/").removesuffix(".py").replace("/", ".")


def _convert_code(source: str) -> str:
    """The sync code made of async ``source`` (before ruff)."""
    lines = []
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        if stripped in IMPORTS:
            line = line.replace(stripped, IMPORTS[stripped]) if IMPORTS[stripped] else ""
        lines.append(line)
    text = "".join(_unwrap(lines))
    for module_source, module_target in MODULES.items():
        text = text.replace(
            f"from {_module(module_source)} import", f"from {_module(module_target)} import"
        )
    for literal, replacement in LITERALS.items():
        text = text.replace(literal, replacement)
    text = DOTTED_PATTERN.sub(lambda found: DOTTED[found.group(1)], text)
    text = _tokens(text)
    text = _drop_awaitable(text)
    return NOQA_ASYNC.sub("", text)


def convert(source: str, source_path: str) -> str:
    """The sync module made of ``source`` (before ruff)."""
    return HEADER.format(source=source_path.removeprefix("queue/")) + _convert_code(source)


def _section_bounds(lines: list[str], path: str) -> list[tuple[int, int, int]]:
    """The line numbers of each section's three markers, checked to come in order."""
    bounds: list[tuple[int, int, int]] = []
    found: list[int] = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        for marker in (SECTION_START, SECTION_SYNC, SECTION_END):
            if stripped.startswith(marker):
                expected = (SECTION_START, SECTION_SYNC, SECTION_END)[len(found)]
                if marker != expected:
                    raise ValueError(f"{path}:{number + 1}: {expected!r} expected here")
                found.append(number)
        if len(found) == 3:
            bounds.append((found[0], found[1], found[2]))
            found = []
    if found:
        raise ValueError(f"{path}: a section opened at line {found[0] + 1} is not closed")
    return bounds


def convert_sections(source: str, path: str) -> str:
    """``source`` with each sync section made anew from the async section above it (before
    ruff); the rest of the module as it is."""
    lines = source.splitlines(keepends=True)
    kept: list[str] = []
    done = 0
    for start, sync, end in _section_bounds(lines, path):
        kept.extend(lines[done : sync + 1])
        indent = lines[sync][: len(lines[sync]) - len(lines[sync].lstrip())]
        code = textwrap.dedent("".join(lines[start + 1 : sync])).strip("\n") + "\n"
        kept.append(f"\n\n{textwrap.indent(_convert_code(code), indent)}\n\n")
        done = end
    kept.extend(lines[done:])
    return "".join(kept)


def _ruff(args: list[str], text: str, target: str) -> str:
    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff) if ruff.exists() else "ruff", *args, "--stdin-filename", target, "-"]
    done = subprocess.run(
        command, input=text, capture_output=True, text=True, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff {' '.join(args)} failed on {target}:\n{done.stderr}")
    return done.stdout


def generate(source_path: str, target_path: str) -> str:
    """The text of ``target_path`` as generated from ``source_path`` (nothing written)."""
    source = (ROOT / source_path).read_text()
    text = convert(source, source_path)
    text = _ruff(["check", "--fix-only", "--select", "I,F401", "--exit-zero"], text, target_path)
    return _ruff(["format"], text, target_path)


def section_modules() -> list[str]:
    """Every module of the package with a generated section, relative to the root."""
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / PACKAGE).rglob("*.py")
        if SECTION_SYNC in path.read_text()
    )


def generate_sections(path: str) -> str:
    """The text of module ``path`` with its sync sections generated (nothing written)."""
    return _ruff(["format"], convert_sections((ROOT / path).read_text(), path), path)


def generated() -> dict[str, str]:
    """Every generated file's path and the text it should have."""
    texts = {target: generate(source, target) for source, target in MODULES.items()}
    texts.update((path, generate_sections(path)) for path in section_modules())
    return texts


def main() -> int:
    for target_path, text in generated().items():
        target = ROOT / target_path
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote {target_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
