"""What the HTTP server's event streams read (sql/realtime/changes.sql): the changes channel,
where announced runs belong, and the runs themselves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fairlane.engine.rows import run_from_row
from fairlane.engine.section import Section
from fairlane.engine.sqlfiles import changes_channel_name
from fairlane.engine.statement import Row, Statement, no_rows
from fairlane.models import Run


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where an announced run belongs: the streams of which tags and batch follow it."""

    id: int
    environment: str
    tags: tuple[str, ...]
    batch_id: int | None


def _place(row: Row) -> RunPlace:
    return RunPlace(row["id"], row["environment"], tuple(row["tags"] or ()), row["batch_id"])


class Realtime(Section):
    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.changes_channel = changes_channel_name(schema)

    def listen(self) -> Statement[None]:
        """Created and changed runs (payload: run ids, comma-separated)."""
        return self._statement("listen_changes_channel", None, no_rows)

    def places(self, ids: Sequence[int]) -> Statement[RunPlace]:
        return self._statement("route_changed_runs", {"ids": list(ids)}, _place)

    def runs(self, ids: Sequence[int], environment: str | None) -> Statement[Run]:
        params = {"ids": list(ids), "environment": environment}
        return self._statement("runs_by_ids", params, run_from_row)

    def batch_runs(self, batch_id: int, limit: int) -> Statement[Run]:
        params = {"batch_id": batch_id, "limit": limit}
        return self._statement("batch_runs", params, run_from_row)
