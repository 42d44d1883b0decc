"""The attempts a worker ended, by task and status: ``fairlane_runs_finished`` and
``fairlane_run_duration_seconds``.

They are kept as plain numbers and turned into series at each scrape (a collector), not as
prometheus_client children: an observation there takes a lock for the sum and another for its
bucket, and with the counter's that was a share of a no-op run's Python time in the worker
worth saving (bench/sittings/06-run-metrics-per-written-batch-a-lighter-bulk-trigger.md). Here
the writer hands over each written batch at once, and a run costs a bisect and two additions.

Only the worker's event loop records. A scrape (another thread) reads the numbers as they are
at that moment, bucket by bucket, as prometheus_client's own histograms are read.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import utils
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

FINISHED_HELP = "Attempts this worker ended, by task and outcome"
DURATION_HELP = "How long handlers ran, by task and by how the attempt ended"
LABELS = ("task", "status")
# How prometheus_client writes a bucket's bound (1 as "1.0"), so the series stay the same.
_bound_text: Callable[[float], str] = utils.floatToGoString


class _Series:
    """One (task, status): how many attempts fell in each bucket (the last one past every
    bound), and the sum of their durations."""

    __slots__ = ("in_bucket", "seconds")

    def __init__(self, buckets: int) -> None:
        self.in_bucket = [0] * (buckets + 1)
        self.seconds = 0.0


class RunOutcomes:
    """A collector of the attempts a worker ended; register it on the worker's registry."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(float(bound) for bound in buckets)
        self._labels = [_bound_text(bound) for bound in self.bounds] + ["+Inf"]
        self._series: dict[tuple[str, str], _Series] = {}

    def record(self, task: str, status: str, durations: Iterable[float]) -> None:
        """Attempts of ``task`` that ended as ``status``, each handler's duration in seconds."""
        series = self._series.get((task, status))
        if series is None:
            series = self._series[(task, status)] = _Series(len(self.bounds))
        in_bucket, bounds = series.in_bucket, self.bounds
        total = 0.0
        for seconds in durations:
            # A bucket counts what is at most its bound: the first bound not below the value.
            in_bucket[bisect_left(bounds, seconds)] += 1
            total += seconds
        series.seconds += total

    def collect(self) -> Iterator[Metric]:
        finished = CounterMetricFamily("fairlane_runs_finished", FINISHED_HELP, labels=LABELS)
        duration = HistogramMetricFamily(
            "fairlane_run_duration_seconds", DURATION_HELP, labels=LABELS
        )
        for (task, status), series in list(self._series.items()):
            cumulative = list(accumulate(series.in_bucket))
            finished.add_metric([task, status], cumulative[-1])
            duration.add_metric(
                [task, status], list(zip(self._labels, cumulative, strict=True)), series.seconds
            )
        yield finished
        yield duration
