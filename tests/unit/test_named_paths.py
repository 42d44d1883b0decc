"""Every path of the repository that a comment, a docstring or a document names exists.

A path is a word that starts with one of the repository's top-level folders (``sql/``,
``queue/``, ``tests/``, ``docs/``, ``migrations/``, ``bench/``, ``.ci/``) or, in the package's
own comments, with one of its sub-packages (``worker/lease_store.py``), and ends in a file name
with an extension or in a folder (``/``). Paths under a package folder are also looked up
inside ``queue/fairlane/`` and ``sql/``, the two trees the docs name relative to each other
(docs/architecture.md). A word with a placeholder (``<name>``, ``*``, ``{schema}``) is a pattern,
not a path, and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "queue" / "fairlane"
TOP = ("sql", "queue", "tests", "docs", "migrations", "bench", ".ci")
SCANNED = ("*.py", "*.sql", "*.md", "Makefile", "*.toml", "*.ini", "run", "postgres")
SKIPPED = ("bench/sittings/", ".venv/", "build/", "dist/", ".git/", "bench/results/")
# Folders that commands make (ignored by git), named as where output goes.
MADE = ("bench/results/",)

_PATH = re.compile(r"(?<![\w./-])((?:\.ci|[a-z_][a-z0-9_]*)(?:/[\w.-]+)+/?)")
_FILE = re.compile(r"\.(py|sql|md|toml|ini|sha256|jsonl|html|css|js|mako|txt)$")


def _files() -> Iterator[Path]:
    for pattern in SCANNED:
        for path in ROOT.rglob(pattern):
            relative = path.relative_to(ROOT).as_posix()
            if path.is_file() and not any(relative.startswith(skip) for skip in SKIPPED):
                yield path


def _roots() -> set[str]:
    return {
        *TOP,
        *(p.name for p in PACKAGE.iterdir() if p.is_dir()),
        *(p.name for p in (ROOT / "sql").iterdir() if p.is_dir()),
    }


def _candidates(word: str) -> list[Path]:
    bare = word.rstrip("/")
    return [ROOT / bare, PACKAGE / bare, ROOT / "sql" / bare, ROOT / "tests" / bare]


def _named(text: str, roots: set[str]) -> Iterator[str]:
    for match in _PATH.finditer(text):
        word = match.group(1).rstrip(".,:;)")
        first = word.split("/", 1)[0]
        if first not in roots or any(mark in word for mark in "<>*{}$"):
            continue
        if word.endswith("/") or _FILE.search(word):
            yield word


def test_every_named_path_exists() -> None:
    roots = _roots()
    missing: list[str] = []
    for path in _files():
        text = path.read_text("utf-8", errors="replace")
        for word in sorted(set(_named(text, roots))):
            if word in MADE:
                continue
            if not any(candidate.exists() for candidate in _candidates(word)):
                missing.append(f"{path.relative_to(ROOT)}: {word}")
    assert not missing, "paths named but not found:\n" + "\n".join(missing)
