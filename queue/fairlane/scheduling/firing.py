"""Deprecated: ``fairlane.scheduling.firing`` is ``fairlane.cron.firing``."""

import sys
import warnings

import fairlane.cron.firing

warnings.warn(
    "fairlane.scheduling.firing is deprecated: use fairlane.cron.firing",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = fairlane.cron.firing
