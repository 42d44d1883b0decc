"""The HTTP API's statements (sql/web/): API keys, signing secrets, environment tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairlane.engine.batches import batch_from_row
from fairlane.engine.section import Section
from fairlane.engine.statement import Row, Statement
from fairlane.models import ApiKey, Batch, EnvironmentSettings, ItemRow, QueueSettings


@dataclass(frozen=True, slots=True)
class ChildRow:
    id: int
    task: str
    status: str
    queue: str
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class WaitEdgeRow:
    attempt: int
    position: int
    item: int
    waitpoint_id: int
    kind: str
    status: str
    run_id: int | None
    complete_after: datetime | None
    timeout_at: datetime | None
    completed_at: datetime | None
    is_error: bool


@dataclass(frozen=True, slots=True)
class TokenOwner:
    id: int
    environment: str | None


class Web(Section):
    # -- API keys -----------------------------------------------------------------------

    def create_key(
        self,
        kind: str,
        environment: str | None,
        name: str | None,
        prefix: str,
        secret_hash: str,
    ) -> Statement[ApiKey]:
        params = {
            "kind": kind,
            "environment": environment,
            "name": name,
            "prefix": prefix,
            "secret_hash": secret_hash,
        }
        return self._statement("create_api_key", params, lambda row: ApiKey(**row))

    def list_keys(self, environment: str | None, include_revoked: bool) -> Statement[ApiKey]:
        params = {"environment": environment, "include_revoked": include_revoked}
        return self._statement("list_api_keys", params, lambda row: ApiKey(**row))

    def revoke_key(self, key_id: int, environment: str | None) -> Statement[ApiKey]:
        params = {"id": key_id, "environment": environment}
        return self._statement("revoke_api_key", params, lambda row: ApiKey(**row))

    def authenticate(self, secret_hash: str) -> Statement[ApiKey]:
        return self._statement(
            "authenticate_api_key", {"secret_hash": secret_hash}, lambda row: ApiKey(**row)
        )

    # -- dashboard sessions -------------------------------------------------------------

    def open_session(
        self, secret_hash: str, key_id: int, lifetime_s: float, idle_s: float
    ) -> Statement[str]:
        params = {"secret_hash": secret_hash, "key_id": key_id}
        params |= {"lifetime_s": lifetime_s, "idle_s": idle_s}
        return self._statement("open_dashboard_session", params, lambda row: row["secret_hash"])

    def session_key(
        self, secret_hash: str, idle_s: float, touch: bool, touch_s: float
    ) -> Statement[ApiKey]:
        params = {"secret_hash": secret_hash, "idle_s": idle_s, "touch": touch, "touch_s": touch_s}
        return self._statement("dashboard_session", params, lambda row: ApiKey(**row))

    def close_session(self, secret_hash: str) -> Statement[str]:
        params = {"secret_hash": secret_hash}
        return self._statement("close_dashboard_session", params, lambda row: row["secret_hash"])

    # -- signing secrets ----------------------------------------------------------------

    def ensure_secret(self, name: str, candidate: bytes) -> Statement[bytes]:
        params = {"name": name, "candidate": candidate}
        return self._statement("ensure_web_secret", params, lambda row: bytes(row["secret"]))

    # -- tokens -------------------------------------------------------------------------

    def create_token(
        self, environment: str, key: str | None, key_ttl_s: float, timeout_s: float | None
    ) -> Statement[TokenOwner]:
        params = {
            "environment": environment,
            "key": key,
            "key_ttl_s": key_ttl_s,
            "timeout_s": timeout_s,
        }
        return self._statement("create_environment_token", params, lambda row: TokenOwner(**row))

    # -- reading ------------------------------------------------------------------------

    def environment_settings(self, name: str) -> Statement[EnvironmentSettings]:
        return self._statement(
            "get_environment_settings", {"name": name}, lambda row: EnvironmentSettings(**row)
        )

    def queue_settings(self, environment: str, name: str) -> Statement[QueueSettings]:
        params = {"environment": environment, "name": name}
        return self._statement("get_queue_settings", params, lambda row: QueueSettings(**row))

    def batch_items_page(
        self, batch_id: int, after_index: int | None, state: str | None, limit: int
    ) -> Statement[ItemRow]:
        params = {"id": batch_id, "after_index": after_index, "state": state, "limit": limit}
        return self._statement("batch_items_page", params, lambda row: ItemRow(**row))

    # -- the dashboard ------------------------------------------------------------------

    def finished_per_minute(
        self, minutes: int, environments: Sequence[str]
    ) -> Statement[dict[str, Any]]:
        params = {"minutes": minutes, "environments": list(environments)}
        return self._statement("finished_per_minute", params, _as_dict)

    def oldest_heads(self, environments: Sequence[str]) -> Statement[dict[str, Any]]:
        return self._statement("oldest_heads", {"environments": list(environments)}, _as_dict)

    def schedules_page(
        self, search: str | None, limit: int, offset: int
    ) -> Statement[dict[str, Any]]:
        params = {"search": search, "limit": limit, "offset": offset}
        return self._statement("schedules_page", params, _as_dict)

    def busy_environments(
        self, search: str | None, name: str | None, limit: int, offset: int
    ) -> Statement[dict[str, Any]]:
        params = {"search": search, "name": name, "limit": limit, "offset": offset}
        return self._statement("busy_environments", params, _as_dict)

    def busy_queues(
        self, environments: Sequence[str], search: str | None, per_environment: int, offset: int
    ) -> Statement[dict[str, Any]]:
        params = {
            "environments": list(environments),
            "search": search,
            "per_environment": per_environment,
            "offset": offset,
        }
        return self._statement("busy_queues", params, _as_dict)

    def run_children(self, run_id: int, limit: int) -> Statement[ChildRow]:
        params = {"id": run_id, "limit": limit}
        return self._statement("run_children", params, lambda row: ChildRow(**row))

    def run_waits(self, run_id: int, limit: int) -> Statement[WaitEdgeRow]:
        params = {"id": run_id, "limit": limit}
        return self._statement("run_waits", params, lambda row: WaitEdgeRow(**row))

    def run_batch(self, run_id: int) -> Statement[dict[str, Any]]:
        return self._statement("run_batch", {"id": run_id}, _as_dict)

    def recent_batches(
        self, environment: str | None, before_id: int | None, limit: int
    ) -> Statement[Batch]:
        params = {"environment": environment, "before_id": before_id, "limit": limit}
        return self._statement(
            "recent_batches", params, lambda row: batch_from_row(row, error=None)
        )


def _as_dict(row: Row) -> dict[str, Any]:
    return dict(row)


__all__ = ["ChildRow", "TokenOwner", "WaitEdgeRow", "Web"]
