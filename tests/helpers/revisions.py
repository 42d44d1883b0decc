"""A copy of the migrations with one more revision that only a test runs, and the statements a
run of revisions sends."""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from fairlane.schema import migrate
from fairlane.schema.revision_hashes import migrations_dir


def with_revision(folder: Path, body: str) -> tuple[Path, str]:
    """The migrations copied to ``folder`` with a revision after head whose ``upgrade()`` is
    ``body`` (imports of fairlane.schema.revision_helpers, ``op`` and ``sa`` available).
    Returns the copy and the new revision's id."""
    head = migrate.head_revision()
    assert head is not None
    number = f"{int(head) + 1:04d}"
    copy = folder / "migrations"
    shutil.copytree(migrations_dir(), copy)
    source = textwrap.dedent(
        '''\
        """A revision only the tests run."""

        import sqlalchemy as sa
        from alembic import op

        from fairlane.schema.revision_helpers import *  # noqa: F403

        revision = "{number}"
        down_revision = "{head}"
        branch_labels = None
        depends_on = None


        def upgrade() -> None:
        {body}


        def downgrade() -> None:
            pass
        '''
    ).format(number=number, head=head, body=textwrap.indent(textwrap.dedent(body), "    "))
    (copy / "versions" / f"{number}_test_only.py").write_text(source)
    return copy, number


@contextmanager
def statements_sent() -> Iterator[list[str]]:
    """Every statement SQLAlchemy sends while the block runs (alembic's revisions go through
    it, the helpers of fairlane.schema.revision_helpers too)."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)


_INDEX_STATEMENT = re.compile(
    r"^\s*(?P<verb>CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX(?:\s+\w+)?|"
    r"ALTER\s+TABLE(?:\s+ONLY)?\s+(?P<altered>\S+).*?ADD\s+(?:CONSTRAINT\s+\S+\s+)?"
    r"(?:UNIQUE|PRIMARY\s+KEY|EXCLUDE)(?!.*USING\s+INDEX))"
    r"(?P<concurrently>\s+CONCURRENTLY)?(?P<rest>.*)$",
    re.IGNORECASE | re.DOTALL,
)
_ON_TABLE = re.compile(r"\bON\s+(?:ONLY\s+)?(\S+)", re.IGNORECASE)
_LAST_NAME = re.compile(r"(?:IF\s+EXISTS\s+)?(\S+)\s*$", re.IGNORECASE)


def blocking_index_statements(
    sent: list[str], table_of: dict[str, str], large: frozenset[str]
) -> list[str]:
    """The statements of ``sent`` that build or drop an index on a table of ``large`` without
    CONCURRENTLY (``table_of``: an existing index's table, by unqualified name)."""
    found: list[str] = []
    for statement in sent:
        match = _INDEX_STATEMENT.match(statement)
        if match is None or match.group("concurrently"):
            continue
        verb = match.group("verb").split()[0].upper()
        if match.group("altered"):
            table = match.group("altered")
        elif verb == "CREATE":
            on = _ON_TABLE.search(match.group("rest"))
            table = on.group(1) if on else ""
        else:
            found_name = _LAST_NAME.search(match.group("rest").split(",")[0])
            name = _unqualified(found_name.group(1)) if found_name else ""
            is_table = verb == "REINDEX" and "TABLE" in match.group("verb").upper()
            table = name if is_table else table_of.get(name, "")
        if _unqualified(table) in large:
            found.append(" ".join(statement.split()))
    return found


def _unqualified(name: str) -> str:
    return name.rsplit(".", 1)[-1].strip('"')
