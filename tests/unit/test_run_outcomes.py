"""The worker's run series, kept by a collector, read as prometheus_client's own would be."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fairlane.metrics.runs import DURATION_HELP, FINISHED_HELP, RunOutcomes
from fairlane.metrics.worker import RUN_BUCKETS

# On and around the bounds (a bound counts in its own bucket), between them, past the last.
DURATIONS = {
    ("send", "COMPLETED"): [0.0, 0.01, 0.0100001, 0.2, 1, 2.5, 59.9, 3600, 3600.5, 1e6],
    ("send", "RETRIED"): [0.05, 0.05, 0.3],
    ("bill", "FAILED"): [900.0],
}


def _samples(registry: CollectorRegistry) -> list[str]:
    """The exposition's lines but the ``_created`` ones (the time each series started)."""
    text = generate_latest(registry).decode()
    return sorted(line for line in text.splitlines() if "_created" not in line)


def _registries() -> tuple[CollectorRegistry, RunOutcomes, CollectorRegistry, Histogram, Counter]:
    ours = CollectorRegistry()
    outcomes = RunOutcomes(RUN_BUCKETS)
    ours.register(outcomes)
    theirs = CollectorRegistry()
    duration = Histogram(
        "fairlane_run_duration_seconds",
        DURATION_HELP,
        ["task", "status"],
        buckets=RUN_BUCKETS,
        registry=theirs,
    )
    finished = Counter("fairlane_runs_finished", FINISHED_HELP, ["task", "status"], registry=theirs)
    return ours, outcomes, theirs, duration, finished


def test_the_series_match_a_histogram_and_a_counter_of_prometheus_client() -> None:
    ours, outcomes, theirs, duration, finished = _registries()
    for (task, status), durations in DURATIONS.items():
        # A batch at once, and one at a time: the same series.
        outcomes.record(task, status, durations[:2])
        for seconds in durations[2:]:
            outcomes.record(task, status, [seconds])
        for seconds in durations:
            duration.labels(task, status).observe(seconds)
            finished.labels(task, status).inc()

    assert _samples(ours) == _samples(theirs)


def test_before_any_run_the_families_are_there_without_series() -> None:
    ours, _, theirs, _, _ = _registries()
    assert _samples(ours) == _samples(theirs)
    assert ours.get_sample_value("fairlane_runs_finished_total", {"task": "t"}) is None
