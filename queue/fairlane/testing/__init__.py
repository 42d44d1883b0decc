"""Testing code that uses fairlane (docs/testing.md).

- ``eager(tasks)``: eager mode for unit tests; a trigger runs the handler at once, in-process,
  with no database (``fairlane.testing.eager``).
"""

from fairlane.testing.eager import EagerRuns, eager

__all__ = ["EagerRuns", "eager"]
