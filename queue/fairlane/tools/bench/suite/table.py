"""The side-by-side table from a sitting's JSON lines: a pure function of the lines.

One row per workload with a column per side (medians of the runs), then the ratios the
performance targets are stated in: fairlane against each peer at each drain size, at
concurrency 10 and for enqueue and pickup; each side's rate at one drain size against the next
smaller; fairlane over 1,000 and 10,000 environments against one, and over 10,000 capped at 1
and 5 running each (with the most any environment was seen running); and, when a step reports
them, the runs table's bytes before and after pruning and vacuum.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from fairlane.tools.bench.suite.results import (
    INSTALLED,
    Line,
    Results,
    Value,
    field_value,
    good_values,
    group,
)
from fairlane.tools.bench.suite.sides import (
    CAPPED_TENANTS,
    CAPS,
    ENQUEUE,
    ENQUEUE_RATE,
    FAIRLANE,
    KEYS,
    LATENCY,
    PEERS,
    SIDES,
    TENANTS,
    Side,
    keys_case,
    size_text,
    tenants_case,
)

Row = tuple[str, list[str]]
TIMES = "\u00d7"  # the multiplication sign after a ratio
P50 = field_value("p50_ms")
P99 = field_value("p99_ms")
MOST_RUNNING = field_value("max_running_per_environment")
BYTES = ("runs_table_bytes", "runs_index_bytes")  # + _before / _after


def summarize(lines: Iterable[Line]) -> str:
    """The markdown table, a line on how it was measured, and why any column is empty."""
    results = group(lines)
    rows = [*_workload_rows(results), *_ratio_rows(results)]
    header = "| workload | " + " | ".join(side.title for side in SIDES) + " |"
    out = [header, "|---|" + "---:|" * len(SIDES)]
    out += ["| " + title + " | " + " | ".join(cells) + " |" for title, cells in rows]
    out += ["", _legend()]
    out += [
        f"{side.title}: not installed ({results.status[side.name]})"
        for side in PEERS
        if results.status.get(side.name, INSTALLED) != INSTALLED
    ]
    return "\n".join(out) + "\n"


def _legend() -> str:
    return (
        "Medians of the runs (each run's figure in brackets when there are several). Drains in "
        "runs/s, timed from the first handler call until the database shows no run pending, as "
        "the peer harness times them; enqueue in runs/s, 1,000 per call; pickup in ms."
    )


def _workload_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for size in _sizes(results, "best"):
        cells = [_drain_cell(results, side, side.best, size) for side in SIDES]
        rows.append((f"drain {size_text(size)}, best setting (runs/s)", cells))
    for size in _sizes(results, "c10"):
        cells = [_drain_cell(results, side, side.c10, size) for side in SIDES]
        rows.append((f"drain {size_text(size)}, concurrency 10 (runs/s)", cells))
    for size in results.sizes(FAIRLANE, ENQUEUE):
        cells = [_enqueue_cell(results, side, size) for side in SIDES]
        rows.append((f"bulk enqueue {size_text(size)}, 1,000 per call (runs/s)", cells))
    for size in _filling_sizes(results):
        cells = [_filling_cell(results, side, size) for side in SIDES]
        title = f"bulk enqueue {size_text(size)} before the best drain, 1,000 per call (runs/s)"
        rows.append((title, cells))
    if any(results.sizes(side, LATENCY) for side in SIDES):
        rows.append(("pickup p50 / p99 (ms)", [_latency_cell(results, side) for side in SIDES]))
    return rows


def _ratio_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for size in _sizes(results, "best"):
        title = f"fairlane ÷ peer, drain {size_text(size)} best"
        rows.append((title, _against_peers(results, "best", size)))
    for size in _sizes(results, "c10"):
        title = f"fairlane ÷ peer, drain {size_text(size)} concurrency 10"
        rows.append((title, _against_peers(results, "c10", size)))
    rows += _enqueue_and_pickup_ratios(results)
    sizes = _sizes(results, "best")
    for smaller, larger in itertools.pairwise(sizes):
        title = f"drain {size_text(larger)} ÷ drain {size_text(smaller)}, best setting"
        rows.append((title, [_own_ratio(results, side, smaller, larger) for side in SIDES]))
    rows += _tenants_rows(results)
    rows += _runs_table_rows(results)
    return [(title, cells) for title, cells in rows if any(cell for cell in cells)]


def _sizes(results: Results, kind: str) -> list[int]:
    return sorted({size for side in SIDES for size in results.sizes(side, getattr(side, kind))})


def _drain_cell(results: Results, side: Side, case: str, size: int) -> str:
    lines = results.lines(side, case, size)
    return results.cell(side, case, size, field_value(side.rate_field), _rate, _setting(lines))


def _setting(lines: list[Line]) -> str:
    """``400/200: `` for fairlane (concurrency / claim batch), ``tuned: `` for a peer."""
    for line in lines:
        if "config" in line:
            return f"{line['config']}: "
        if "claim_batch" in line:
            return f"{line['concurrency']}/{line['claim_batch']}: "
    return ""


def _enqueue_cell(results: Results, side: Side, size: int) -> str:
    if side is FAIRLANE:
        return results.cell(side, ENQUEUE, size, field_value(ENQUEUE_RATE), _rate)
    # A peer's bulk enqueue is timed inside its throughput step (the same 1,000 per call).
    prefix = f"from {side.best.rsplit('/', 1)[1]}: "
    return results.cell(side, side.best, size, field_value(side.filling_field), _rate, prefix)


def _filling_sizes(results: Results) -> list[int]:
    """The best drains' sizes that the enqueue step does not cover: every side times the bulk
    enqueue that fills a drain (the peers' enqueue figures all come from there)."""
    measured = set(results.sizes(FAIRLANE, ENQUEUE))
    return [
        size
        for size in _sizes(results, "best")
        if size not in measured
        and any(
            side.filling_field in line
            for side in SIDES
            for line in results.lines(side, side.best, size)
        )
    ]


def _filling_cell(results: Results, side: Side, size: int) -> str:
    lines = results.lines(side, side.best, size)
    prefix = f"from {_setting(lines)}" if lines else ""
    return results.cell(side, side.best, size, field_value(side.filling_field), _rate, prefix)


def _latency_cell(results: Results, side: Side) -> str:
    p50 = results.cell(side, LATENCY, 0, P50, _ms)
    p99 = results.cell(side, LATENCY, 0, P99, _ms)
    return p50 if p50 == p99 else f"{p50} / {p99}"


def _against_peers(results: Results, kind: str, size: int) -> list[str]:
    ours = results.median(FAIRLANE, getattr(FAIRLANE, kind), size, field_value(FAIRLANE.rate_field))
    cells = [""]
    for peer in PEERS:
        theirs = results.median(peer, getattr(peer, kind), size, field_value(peer.rate_field))
        cells.append(_ratio(ours, theirs))
    return cells


def _enqueue_and_pickup_ratios(results: Results) -> list[Row]:
    rows: list[Row] = []
    for size in results.sizes(FAIRLANE, ENQUEUE):
        ours = results.median(FAIRLANE, ENQUEUE, size, field_value(ENQUEUE_RATE))
        cells = _enqueue_against_peers(results, ours, size)
        rows.append((f"fairlane ÷ peer, bulk enqueue {size_text(size)}", cells))
    for size in _filling_sizes(results):
        ours = results.median(FAIRLANE, FAIRLANE.best, size, field_value(FAIRLANE.filling_field))
        cells = _enqueue_against_peers(results, ours, size)
        rows.append((f"fairlane ÷ peer, bulk enqueue {size_text(size)} before the drain", cells))
    pickup = [""]
    for peer in PEERS:
        p50, p99 = (_pickup_ratio(results, peer, value) for value in (P50, P99))
        pickup.append(f"{p50} / {p99}" if p50 and p99 else "")
    rows.append(("fairlane ÷ peer, pickup p50 / p99", pickup))
    return rows


def _enqueue_against_peers(results: Results, ours: float | None, size: int) -> list[str]:
    """fairlane's enqueue rate ÷ each peer's (read from its best drain's lines), after
    fairlane's empty cell."""
    return [""] + [
        _ratio(ours, results.median(peer, peer.best, size, field_value(peer.filling_field)))
        for peer in PEERS
    ]


def _pickup_ratio(results: Results, peer: Side, value: Value) -> str:
    return _ratio(
        results.median(FAIRLANE, LATENCY, 0, value), results.median(peer, LATENCY, 0, value)
    )


def _own_ratio(results: Results, side: Side, smaller: int, larger: int) -> str:
    rate = field_value(side.rate_field)
    return _ratio(
        results.median(side, side.best, larger, rate),
        results.median(side, side.best, smaller, rate),
    )


def _tenants_rows(results: Results) -> list[Row]:
    """Each spread's drain ÷ the same drain in one environment, at the best setting and at
    concurrency 10 (issue: at least 0.8); then the capped spreads, with the most EXECUTING runs
    the drain saw in one environment (at most the cap)."""
    one, *spreads = TENANTS
    rows: list[Row] = []
    rate = field_value(FAIRLANE.rate_field)
    for c10 in (False, True):
        setting = "concurrency 10" if c10 else "best setting"
        cases = [(f"{many:,}", tenants_case(many, c10)) for many in spreads]
        cases += [
            (f"{CAPPED_TENANTS:,} cap {cap}", tenants_case(CAPPED_TENANTS, c10, cap))
            for cap in CAPS
        ]
        for title_tenants, case in cases:
            for size in results.sizes(FAIRLANE, case):
                base = results.median(FAIRLANE, tenants_case(one, c10), size, rate)
                spread = results.median(FAIRLANE, case, size, rate)
                ratio = _ratio(spread, base)
                cell = f"{_rate(spread)} ÷ {_rate(base)} = {ratio}" if ratio else ""
                cell += _most_running(results, case, size)
                title = f"--tenants {title_tenants} ÷ --tenants {one}, drain {size_text(size)}"
                rows.append((f"{title} {setting}", [cell] + [""] * len(PEERS)))
        for size in results.sizes(FAIRLANE, keys_case(KEYS, c10)):
            # The same drain without keys: the table's fairlane drain at that setting.
            keyless = FAIRLANE.c10 if c10 else FAIRLANE.best
            base = results.median(FAIRLANE, keyless, size, rate)
            keyed = results.median(FAIRLANE, keys_case(KEYS, c10), size, rate)
            ratio = _ratio(keyed, base)
            cell = f"{_rate(keyed)} ÷ {_rate(base)} = {ratio}" if ratio else ""
            title = f"--keys {KEYS:,} ÷ keyless, drain {size_text(size)} {setting}"
            rows.append((title, [cell] + [""] * len(PEERS)))
    return rows


def _most_running(results: Results, case: str, size: int) -> str:
    """For a capped drain: the most runs one environment was seen EXECUTING, over its runs."""
    seen = good_values(results.lines(FAIRLANE, case, size), MOST_RUNNING)
    return f"; most running per environment {int(max(seen))}" if seen else ""


def _runs_table_rows(results: Results) -> list[Row]:
    """Filled only when a fairlane step reports the runs table's bytes (drain --sizes)."""
    reported = [
        (size, line)
        for (name, _case, size), lines in results.cells.items()
        if name == FAIRLANE.name
        for line in lines
        if f"{BYTES[0]}_before" in line and f"{BYTES[0]}_after" in line
    ]
    if not reported:
        return []
    size, line = max(reported, key=lambda found: found[0])
    moments = ("before", "after", "pruned") if f"{BYTES[0]}_pruned" in line else ("before", "after")
    parts = [
        f"{name.split('_')[1]} "
        + " → ".join(_bytes(line[f"{name}_{moment}"]) for moment in moments)
        for name in BYTES
        if all(f"{name}_{moment}" in line for moment in moments)
    ]
    title = "runs table; indexes: queued → drained and vacuumed (history kept)"
    if "pruned" in moments:
        title += " → pruned and vacuumed"
    rows: list[Row] = [(f"{title}, {size_text(size)}", ["; ".join(parts)] + [""] * len(PEERS))]
    if "pruned" in moments:
        # What a drained, pruned and vacuumed table keeps, against its size before the drain.
        ratios = [
            f"{name.split('_')[1]} {_ratio(line[f'{name}_pruned'], line[f'{name}_before'])}"
            for name in BYTES
            if f"{name}_pruned" in line
        ]
        rows.append(
            (
                f"runs table; indexes: pruned and vacuumed ÷ queued, {size_text(size)}",
                ["; ".join(ratios)] + [""] * len(PEERS),
            )
        )
    return rows


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return ""
    return f"{numerator / denominator:.2f}{TIMES}"


def _rate(value: float | None) -> str:
    return f"{round(value):,}" if value is not None else ""


def _ms(value: float) -> str:
    return f"{value:.2f}"


def _bytes(value: Any) -> str:
    return f"{float(value) / 1_000_000:,.1f} MB"
