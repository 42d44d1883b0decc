"""Landed revisions are never edited, and the package knows which revision it needs."""

from __future__ import annotations

import shutil
from pathlib import Path

from fairlane.schema import migrate
from fairlane.schema.check import SCHEMA_REVISION, known_revisions
from fairlane.schema.revision_hashes import hash_line, migrations_dir, revision_drift


def test_every_revision_is_listed_with_the_hash_it_landed_with() -> None:
    assert revision_drift(migrations_dir()) == []


def test_an_edited_added_or_removed_revision_is_caught(tmp_path: Path) -> None:
    """The check above means something: a copy of the migrations with each kind of drift."""
    copy = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), copy)
    edited = copy / "versions" / "0004_trigger_options.py"
    edited.write_text(edited.read_text() + "\n# a later edit\n")
    added = copy / "versions" / "0099_unlisted.py"
    added.write_text('"""A revision nobody listed."""\n')
    (copy / "versions" / "0002_fair_scheduling.py").unlink()

    drift = revision_drift(copy)
    assert len(drift) == 3, drift
    assert drift[0].startswith("0004_trigger_options.py: edited after it landed")
    assert drift[1] == f"0099_unlisted.py: not in revisions.sha256 (append `{hash_line(added)}`)"
    assert drift[2] == "0002_fair_scheduling.py: listed in revisions.sha256 but missing"


def test_the_package_needs_the_head_revision() -> None:
    assert migrate.head_revision() == SCHEMA_REVISION
    assert SCHEMA_REVISION in known_revisions()
    assert len(known_revisions()) == int(SCHEMA_REVISION)
