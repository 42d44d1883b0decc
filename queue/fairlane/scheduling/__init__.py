"""Deprecated: the old home of ``fairlane.limits`` and the cron modules (``fairlane.cron``).

``fairlane.scheduling.limits`` is ``fairlane.limits``, ``fairlane.scheduling.cron`` is
``fairlane.cron.expressions`` and ``fairlane.scheduling.firing`` is ``fairlane.cron.firing``;
these names keep importing, with a DeprecationWarning, until the next release.
"""

import warnings

warnings.warn(
    "fairlane.scheduling is deprecated: use fairlane.limits, and fairlane.schedules for cron "
    "schedules",
    DeprecationWarning,
    stacklevel=2,
)
