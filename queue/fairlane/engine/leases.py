"""A worker's fenced writes about the runs it holds (sql/leases/outcomes.sql). Each matches id
AND lease_token: a worker whose lease lapsed and was re-claimed changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from fairlane.engine.section import Section
from fairlane.engine.statement import Statement, scalar


def _leases(ids: Sequence[int], tokens: Sequence[UUID]) -> dict[str, Any]:
    return {"ids": list(ids), "tokens": list(tokens)}


class Leases(Section):
    def heartbeat(
        self, ids: Sequence[int], tokens: Sequence[UUID], lease_s: float
    ) -> Statement[int]:
        """Rows: the ids whose lease was extended (the others are lost)."""
        return self._statement(
            "heartbeat_runs", {**_leases(ids, tokens), "lease_s": lease_s}, scalar
        )

    def complete(
        self, ids: Sequence[int], tokens: Sequence[UUID], results: Sequence[str]
    ) -> Statement[int]:
        """Rows: the ids the fence accepted."""
        return self._statement(
            "complete_runs", {**_leases(ids, tokens), "results": list(results)}, scalar
        )

    def fail(
        self,
        ids: Sequence[int],
        tokens: Sequence[UUID],
        errors: Sequence[str],
        next_statuses: Sequence[str],
        retry_delays: Sequence[float | None],
    ) -> Statement[int]:
        """Rows: the ids the fence accepted."""
        params = {
            **_leases(ids, tokens),
            "errors": list(errors),
            "next_statuses": list(next_statuses),
            "retry_delays": list(retry_delays),
        }
        return self._statement("fail_runs", params, lambda row: int(row["id"]))

    def set_metadata(
        self, ids: Sequence[int], tokens: Sequence[UUID], patches: Sequence[str]
    ) -> Statement[int]:
        """Merge each JSON object of ``patches`` into its run's metadata. Rows: the ids the
        fence accepted."""
        return self._statement(
            "set_run_metadata", {**_leases(ids, tokens), "patches": list(patches)}, scalar
        )

    def release(self, ids: Sequence[int], tokens: Sequence[UUID]) -> Statement[int]:
        """Rows: the ids handed back."""
        return self._statement("release_runs", _leases(ids, tokens), scalar)
