"""Deprecated: ``fairlane.scheduling.cron`` is ``fairlane.cron.expressions``."""

import sys
import warnings

import fairlane.cron.expressions

warnings.warn(
    "fairlane.scheduling.cron is deprecated: use fairlane.cron.expressions",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = fairlane.cron.expressions
