"""The demo's progress line fits 80 columns even with every status present and large counts,
and its closing hint names a command the user's shell can run."""

from __future__ import annotations

import io
import subprocess

from fairlane.tools.demo import ENVIRONMENTS, STATUS_ORDER, Progress, Tally, fairlane_command


def test_the_progress_line_fits_80_columns() -> None:
    counts = {
        (env, status): Tally(9999, 19998, 9999) for env in ENVIRONMENTS for status in STATUS_ORDER
    }
    line = Progress(io.StringIO(), ENVIRONMENTS, 99999).line(counts, 1234.5)
    assert len(line) <= 79
    assert line.startswith("1234.5s acme ")
    quiet = Progress(io.StringIO(), ENVIRONMENTS, 300).line(
        {(ENVIRONMENTS[0], "COMPLETED"): Tally(300, 330, 30)}, 2.0
    )
    assert quiet == "  2.0s acme 300/300 globex 0/300 initech 0/300 | ok 300 | 150/s"


def test_the_hint_runs_as_printed() -> None:
    command = fairlane_command()
    # From the same folder, with PATH as it is: the command the hint prints answers --version.
    done = subprocess.run(
        [command, "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fairlane ")
