"""The lines of a results file grouped by cell, and a cell's text: the median of its runs.

A line is keyed by side, case and size. The suite writes those three fields on every line;
a line from the peer harness's own results file has only its label, so they are read from the
label (``graphile/throughput/tuned@100k``) and its ``jobs`` field instead.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fairlane.tools.bench.suite.sides import LATENCY, Side

Line = Mapping[str, Any]
Value = Callable[[Line], float | None]
Format = Callable[[float], str]
Key = tuple[str, str, int]

SUITE_LABEL = "suite"
INSTALLED = "installed"
NOT_RUN = "\u2013"  # an en dash, as the harness marks a cell with no figure


@dataclass
class Results:
    cells: dict[Key, list[Line]] = field(default_factory=lambda: defaultdict(list))
    status: dict[str, str] = field(default_factory=dict)  # side name -> installed / why not

    def lines(self, side: Side, case: str, size: int) -> list[Line]:
        return self.cells.get(_key(side.name, case, size), [])

    def sizes(self, side: Side, case: str) -> list[int]:
        return sorted({size for name, c, size in self.cells if name == side.name and c == case})

    def absent(self, side: Side) -> str:
        """The text of a cell with no line: the side is not installed, or the step not run."""
        status = self.status.get(side.name, INSTALLED)
        return NOT_RUN if status == INSTALLED else "not installed"

    def median(self, side: Side, case: str, size: int, value: Value) -> float | None:
        values = good_values(self.lines(side, case, size), value)
        return statistics.median(values) if values else None

    def cell(
        self, side: Side, case: str, size: int, value: Value, fmt: Format, prefix: str = ""
    ) -> str:
        """``prefix`` + the median of the runs, the raw values in brackets when there are
        several; failed runs and runs that were not ok are noted."""
        lines = self.lines(side, case, size)
        if not lines:
            return self.absent(side)
        values = good_values(lines, value)
        failures = [str(line["error"]) for line in lines if "error" in line]
        if not values:
            return f"failed ({failures[0]})" if failures else NOT_RUN
        text = prefix + fmt(statistics.median(values))
        if len(values) > 1:
            text += " [" + " ".join(fmt(v) for v in values) + "]"
        if failures:
            text += f", {len(failures)} failed"
        if any(line.get("ok") is False for line in lines):
            text += " (not ok)"
        return text


def good_values(lines: Iterable[Line], value: Value) -> list[float]:
    """The figures of the runs that did not fail, in the order they ran."""
    found = (value(line) for line in lines if "error" not in line)
    return [v for v in found if v is not None]


def field_value(name: str) -> Value:
    def read(line: Line) -> float | None:
        value = line.get(name)
        return float(value) if isinstance(value, int | float) else None

    return read


def group(lines: Iterable[Line]) -> Results:
    results = Results()
    for line in lines:
        if line.get("label") == SUITE_LABEL:
            for name, status in (line.get("peers") or {}).items():
                if results.status.get(name) != INSTALLED:
                    results.status[name] = str(status)
            continue
        key = line_key(line)
        if key is not None:
            results.cells[key].append(line)
    return results


def line_key(line: Line) -> Key | None:
    """(side, case, size) of a step's line; None for a line that is not a step's."""
    label = line.get("label")
    if not isinstance(label, str) or "/" not in label:
        return None
    name, _, rest = label.partition("/")
    case = str(line.get("case") or rest.partition("@")[0])
    size = line.get("size") or line.get("jobs") or line.get("runs") or 0
    return _key(str(line.get("side") or name), case, int(size))


def _key(name: str, case: str, size: int) -> Key:
    # Latency runs the same number of pickups at every size: one cell whatever it says.
    return (name, case, 0 if case == LATENCY else size)
