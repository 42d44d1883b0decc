"""What fairlane does to a process it owns (``fairlane worker``, the benchmarks): the garbage
collector and the event loop. A library must not do either to its host's process, so ``Worker``
never calls these; the command line does, before it starts the worker.

The garbage collector: importing fairlane, psycopg and SQLAlchemy leaves about half a million
long-lived objects. Every full collection walks all of them, and a worker allocating a few
objects per run triggers one every second or so at tens of thousands of runs a second:
measured, 7 full collections of about 70 ms each during a 40,000-run drain, a tenth of the
worker's CPU time. ``gc.freeze`` moves what exists at start-up into the permanent generation,
so collections only look at what the runs made.

The event loop: uvloop when it is installed (the ``uvloop`` extra), unless asked otherwise.
"""

from __future__ import annotations

import gc
import importlib.util
from typing import Literal

from fairlane.errors import ConfigurationError

LoopChoice = Literal["auto", "asyncio", "uvloop"]
LOOP_CHOICES: tuple[LoopChoice, ...] = ("auto", "asyncio", "uvloop")


def settle_heap() -> None:
    """Collect once, then freeze the survivors out of every later collection."""
    gc.collect()
    gc.freeze()


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
