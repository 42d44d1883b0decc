"""What fairlane does to the garbage collector of a process it owns (fairlane.worker.process).

Run in a child process: the test runner's own collector is not the library's to change.
"""

from __future__ import annotations

import json
import subprocess
import sys

from fairlane.worker.process import YOUNG_COLLECTION_THRESHOLD

_SETTLE = """
import gc, json
before = gc.get_threshold()
from fairlane.worker.process import settle_heap
settle_heap()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_settling_freezes_the_start_up_heap_and_raises_only_the_young_threshold() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SETTLE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    young, older, oldest = seen["before"]
    assert young < YOUNG_COLLECTION_THRESHOLD
    assert seen["after"] == [YOUNG_COLLECTION_THRESHOLD, older, oldest]
    # fairlane, psycopg and SQLAlchemy are imported by then: far more than a few objects.
    assert seen["frozen"] > 10_000
