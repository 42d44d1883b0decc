"""The demo's progress line fits 80 columns even with every status present and large counts,
and its closing hint names a command the user's shell can run."""

from __future__ import annotations

import io
import subprocess

from fairlane.tools.demo import (
    ENVIRONMENTS,
    STATUS_ORDER,
    Progress,
    Tally,
    fairlane_command,
    fit,
)


def test_the_progress_line_fits_80_columns() -> None:
    counts = {
        (env, status): Tally(9999, 19998, 9999) for env in ENVIRONMENTS for status in STATUS_ORDER
    }
    line = Progress(io.StringIO(), ENVIRONMENTS, 99999).line(counts, 1234.5)
    assert len(line) <= 79
    assert line.startswith("1234.5s ")
    # Cut between words: what is shown of a count is the whole count.
    assert line.endswith("\u2026")
    assert line[-2].isdigit() or line[-2].isalpha()
    for shown in line.removesuffix("\u2026").split():
        assert not shown.isdigit() or int(shown) in (9999 * len(ENVIRONMENTS), 99999)
    quiet = Progress(io.StringIO(), ENVIRONMENTS, 300).line(
        {(ENVIRONMENTS[0], "COMPLETED"): Tally(300, 330, 30)}, 2.0
    )
    assert quiet == "  2.0s 150/s | acme 300/300 globex 0/300 initech 0/300 | ok 300"


def test_a_narrow_terminal_cuts_between_words() -> None:
    assert fit("12.0s 4000/s | acme 10/20", 12) == "12.0s\u2026"
    assert fit("12.0s 4000/s | acme 10/20", 40) == "12.0s 4000/s | acme 10/20"


def test_the_hint_runs_as_printed() -> None:
    command = fairlane_command()
    # From the same folder, with PATH as it is: the command the hint prints answers --version.
    done = subprocess.run(
        [command, "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fairlane ")
