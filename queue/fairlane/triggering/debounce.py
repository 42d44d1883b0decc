"""Debounce: many triggers within a window make one run, started after the last of them.

The first trigger with a key makes a DELAYED run. Each later trigger with the same key (same
environment and task) while that run has not started pushes its start to now + ``delay``
(never earlier). ``mode="trailing"`` also replaces the run's payload with the latest
trigger's, and its metadata, tags, max_attempts, max_duration and machine with those the
latest trigger gives (an option it leaves out keeps the run's value); ``"leading"`` keeps the
first's. Once the run has started, or when pushing it would start it later than its creation
+ ``max_delay`` (else the ``debounce_max_delay_s`` setting, default 10 minutes), the trigger
makes a new run, which becomes the key's run. Everything is decided in the trigger's
transaction under the key's row lock (``sql/triggering/debounce.sql``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fairlane.durations import Duration, seconds
from fairlane.errors import TriggerOptionError
from fairlane.triggering.checks import MAX_DEBOUNCE_KEY_LENGTH, check_text

# The seeds' minimum: a shorter window debounces nothing useful and only churns the run row.
MIN_DELAY_S = 1.0
MODES = ("leading", "trailing")


@dataclass(frozen=True, slots=True)
class Debounce:
    key: str
    delay: Duration
    mode: Literal["leading", "trailing"] = "leading"
    max_delay: Duration | None = None


@dataclass(frozen=True, slots=True)
class DebounceParams:
    """A checked ``Debounce`` in the form the trigger statement takes."""

    key: str
    delay_s: float
    trailing: bool
    max_delay_s: float | None


def debounce_params(debounce: Debounce) -> DebounceParams:
    """Check a ``Debounce``; raises ``TriggerOptionError`` (or ``InvalidDurationError``)."""
    if not isinstance(debounce, Debounce):
        raise TriggerOptionError("debounce", debounce, "must be a fairlane.Debounce")
    check_text("debounce.key", debounce.key, MAX_DEBOUNCE_KEY_LENGTH)
    delay_s = seconds("debounce.delay", debounce.delay)
    assert delay_s is not None
    if delay_s < MIN_DELAY_S:
        raise TriggerOptionError("debounce.delay", debounce.delay, "must be at least 1 second")
    if debounce.mode not in MODES:
        raise TriggerOptionError("debounce.mode", debounce.mode, "must be 'leading' or 'trailing'")
    max_delay_s = seconds("debounce.max_delay", debounce.max_delay)
    if max_delay_s is not None and max_delay_s <= delay_s:
        raise TriggerOptionError(
            "debounce.max_delay", debounce.max_delay, "must be longer than debounce.delay"
        )
    return DebounceParams(debounce.key, delay_s, debounce.mode == "trailing", max_delay_s)
