"""The template every periodic job and engine setting is written to.

A periodic job is a SQL function of its own file in ``sql/maintenance/`` returning a jsonb
result; its batched loops go through ``repeat_in_batches`` (sql/maintenance/batching.sql), so
a job's work is bounded per tick. Here each job is described once: its name, function, file,
what it does, and the settings it reads, each with its range. ``set_setting`` validates a value
against that range before writing it, so a job never reads a value it cannot use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from fairlane.errors import SettingError

# count: a whole number at least ``minimum``; seconds: a number of seconds at least
# ``minimum``; flag: true or false. ``nullable``: None (JSON null) turns the setting off.
SettingKind = Literal["count", "seconds", "flag"]


@dataclass(frozen=True, slots=True)
class SettingSpec:
    name: str
    kind: SettingKind
    minimum: float = 0
    nullable: bool = False

    def validate(self, value: Any) -> Any:
        """``value`` if this setting can hold it; raises ``SettingError`` otherwise."""
        if value is None:
            if self.nullable:
                return None
            raise SettingError(self.name, value, "must be set (null is not allowed)")
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise SettingError(self.name, value, "must be true or false")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingError(self.name, value, f"must be a number ({self._range()})")
        if not math.isfinite(value) or value < self.minimum:
            raise SettingError(self.name, value, f"must be {self._range()}")
        if self.kind == "count" and value != int(value):
            raise SettingError(self.name, value, f"must be a whole number ({self._range()})")
        return int(value) if self.kind == "count" else value

    def _range(self) -> str:
        unit = "seconds" if self.kind == "seconds" else "a whole number"
        return f"{unit} >= {self.minimum:g}"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A periodic job: ``function`` in ``sql/maintenance/<file>``, run once per tick, in a
    transaction of its own, returning a jsonb result (counts of what it did)."""

    name: str
    function: str
    file: str
    summary: str
    settings: tuple[SettingSpec, ...] = ()
    # The counts of its result that are repairs, each with its kind (a worker adds them to
    # fairlane_repairs_total): what a crash, a missed wake-up or a row edited by hand left
    # wrong, put right. Routine work (promotion, expiry, pruning) is not a repair.
    repairs: tuple[tuple[str, str], ...] = ()


def count(name: str, minimum: int = 1) -> SettingSpec:
    return SettingSpec(name, "count", minimum)


def seconds(name: str, minimum: float = 0, *, nullable: bool = False) -> SettingSpec:
    return SettingSpec(name, "seconds", minimum, nullable)


def flag(name: str) -> SettingSpec:
    return SettingSpec(name, "flag")
