"""Landed revisions are never edited: ``migrations/revisions.sha256`` holds each one's hash.

Adding a revision appends its line (``fairlane.schema.revision_hashes.hash_line``); editing a landed
one makes the check fail (tests/schema/test_revisions.py), because a database that already ran
it would never see the edit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HASH_FILE = "revisions.sha256"


def migrations_dir() -> Path:
    """The alembic script folder: inside the installed wheel, else at the top of the tree."""
    packaged = Path(__file__).resolve().parents[1] / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "migrations"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hash_line(path: Path) -> str:
    """The line a new revision adds to the hash file (``sha256sum`` format)."""
    return f"{file_hash(path)}  {path.name}"


def recorded_hashes(migrations: Path) -> dict[str, str]:
    lines = (migrations / HASH_FILE).read_text("utf-8").splitlines()
    recorded: dict[str, str] = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            recorded[name.strip()] = digest
    return recorded


def revision_drift(migrations: Path) -> list[str]:
    """What differs between the revision files and the hash file: edited, unlisted and
    missing revisions. Empty when they agree."""
    recorded = recorded_hashes(migrations)
    files = {path.name: path for path in (migrations / "versions").glob("[0-9]*.py")}
    drift = [
        f"{name}: edited after it landed (hash {file_hash(files[name])[:12]}, recorded "
        f"{recorded[name][:12]})"
        for name in sorted(files.keys() & recorded.keys())
        if file_hash(files[name]) != recorded[name]
    ]
    drift += [
        f"{name}: not in {HASH_FILE} (append `{hash_line(files[name])}`)"
        for name in sorted(files.keys() - recorded.keys())
    ]
    drift += [
        f"{name}: listed in {HASH_FILE} but missing"
        for name in sorted(recorded.keys() - files.keys())
    ]
    return drift
