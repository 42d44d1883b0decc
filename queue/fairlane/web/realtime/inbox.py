"""What a stream follows, and its inbox: the ids of runs announced changed since it last read.

An inbox is bounded: past ``MAX_PENDING`` ids it forgets them and asks its stream to resync
(read its whole state again), so a slow reader costs a flag, never a growing buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import anyio

MAX_PENDING = 256
Kind = Literal["run", "tag", "batch"]


@dataclass(frozen=True, slots=True)
class Scope:
    """A run (``target`` its id), a tag (the tag) or a batch (its id), in ``environment``;
    None: any environment (an admin key, the dashboard)."""

    kind: Kind
    target: int | str
    environment: str | None

    def covers(self, environment: str) -> bool:
        return self.environment is None or self.environment == environment


@dataclass(frozen=True, slots=True)
class Taken:
    ids: frozenset[int]
    resync: bool


class Inbox:
    def __init__(self, scope: Scope, limit: int = MAX_PENDING) -> None:
        self.scope = scope
        self._limit = limit
        self._pending: set[int] = set()
        self._resync = False
        self._ready = anyio.Event()

    def put(self, run_id: int) -> None:
        if self._resync:
            return
        if len(self._pending) >= self._limit:
            self.resync()
            return
        self._pending.add(run_id)
        self._ready.set()

    def resync(self) -> None:
        """Something may have been missed: the stream reads its whole state again."""
        self._pending.clear()
        self._resync = True
        self._ready.set()

    async def wait(self, seconds: float) -> bool:
        """Whether anything came within ``seconds``."""
        with anyio.move_on_after(seconds if math.isfinite(seconds) else None):
            await self._ready.wait()
        return self._ready.is_set()

    def take(self) -> Taken:
        taken = Taken(frozenset(self._pending), self._resync)
        self._pending = set()
        self._resync = False
        self._ready = anyio.Event()
        return taken
