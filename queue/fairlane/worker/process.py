"""What fairlane does to a process it owns (``fairlane worker``, the benchmarks): the garbage
collector and the event loop. A library must not do either to its host's process, so ``Worker``
never calls these; the command line does, before it starts the worker.

The garbage collector: importing fairlane, psycopg and SQLAlchemy leaves about half a million
long-lived objects. Every full collection walks all of them, and a worker allocating a few
objects per run triggers one every second or so at tens of thousands of runs a second, each
walking them all again. ``gc.freeze`` moves what exists at start-up into the permanent
generation, so collections only look at what the runs made.

What the runs make is then mostly freed by reference counting (tests/worker/test_run_lifetime.py
holds that), but a run lives for several young collections at Python's default threshold of 700
allocations: every claimed batch and every run in flight was walked again and again and
promoted, which in turn set off full collections that found nothing to free. The young
threshold is a count of objects allocated and not yet freed, so it is set above what a drain
holds alive after the freeze at the benchmarks' best setting (runner tasks, runs in flight,
their rows: about 200,000 objects), and most runs end before a young collection walks them.
A threshold of 10,000 already spared most full collections; 100,000 also spares the young ones,
for less worker CPU per run at the same peak memory and pickup latency (the figures are in
bench/sittings/05-runs-freed-by-reference-counting-young-collections-every-10.md and
bench/sittings/10-a-lighter-bulk-trigger-claims-without-json-calls.md). The older generations
keep their default ratios, so cycles that do outlive the young collections (a handler's own,
say) are still collected.

The event loop: uvloop when it is installed (the ``uvloop`` extra), unless asked otherwise.
"""

from __future__ import annotations

import gc
import importlib.util
from typing import Literal

from fairlane.errors import ConfigurationError

LoopChoice = Literal["auto", "asyncio", "uvloop"]
LOOP_CHOICES: tuple[LoopChoice, ...] = ("auto", "asyncio", "uvloop")


# Allocations between young collections; Python's default is 700.
YOUNG_COLLECTION_THRESHOLD = 100_000


def settle_heap() -> None:
    """Collect once, freeze the survivors out of every later collection, and let young
    objects live longer before they are walked."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def use_uvloop(choice: LoopChoice) -> bool:
    """Whether to run on uvloop: ``auto`` takes it when installed."""
    if choice == "uvloop" and not uvloop_installed():
        raise ConfigurationError(
            "--loop uvloop: uvloop is not installed (pip install fairlane[uvloop])"
        )
    return choice == "uvloop" or (choice == "auto" and uvloop_installed())


def loop_name(choice: LoopChoice) -> str:
    """The loop a choice runs on."""
    return "uvloop" if use_uvloop(choice) else "asyncio"
