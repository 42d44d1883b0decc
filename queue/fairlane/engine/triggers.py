"""The trigger statements (sql/triggering/requests.sql): plain requests in one INSERT, keyed
ones (idempotency, debounce) decided under row locks."""

from __future__ import annotations

from typing import NamedTuple

from fairlane.engine.section import Section
from fairlane.engine.statement import ByColumns, Statement


class TriggerRow(NamedTuple):
    """A run a keyed trigger made or found (``outcome``: created, idempotent, debounced); every
    run a plain trigger made (``ids``, in request order: one row, not one per run); or, with
    ``id`` and ``ids`` None, the size limit that refused the whole trigger."""

    id: int | None
    ids: list[int] | None
    outcome: str | None
    environment: str | None
    queue: str | None
    size_limit: int | None
    scope: str | None
    size: int | None
    # The request's index (the keyed statement numbers its rows; the plain one does not).
    item: int | None


# A keyed bulk trigger reads a row per run: by position, its columns found by name once.
_trigger_row = ByColumns(
    ("id", "ids", "outcome", "environment", "queue", "size_limit", "scope", "size", "item"),
    TriggerRow,
)


class Triggers(Section):
    def plain(self, runs_json: str) -> Statement[TriggerRow]:
        return self._statement("insert_runs", {"runs": runs_json}, _trigger_row)

    def keyed(self, runs_json: str) -> Statement[TriggerRow]:
        return self._statement("trigger_keyed_runs", {"runs": runs_json}, _trigger_row)
