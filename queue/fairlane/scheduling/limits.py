"""Deprecated: ``fairlane.scheduling.limits`` is ``fairlane.limits``."""

import sys
import warnings

import fairlane.limits

warnings.warn(
    "fairlane.scheduling.limits is deprecated: use fairlane.limits",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = fairlane.limits
