"""A worker's own counters, read from its ``WorkerStats`` at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from fairlane.worker.stats import WorkerStats

# Each run outcome the worker counts, as the status label of fairlane_runs_finished_total.
_FINISHED = {
    "completed": "COMPLETED", "failed": "FAILED", "retried": "RETRIED",
    "timed_out": "TIMED_OUT", "released": "RELEASED", "canceled": "CANCELED",
}  # fmt: skip


class WorkerCollector(Collector):
    def __init__(self, stats: WorkerStats, worker_id: str) -> None:
        self.stats = stats
        self.worker_id = worker_id

    def _counter(self, name: str, text: str, value: int) -> CounterMetricFamily:
        family = CounterMetricFamily(name, text, labels=["worker"])
        family.add_metric([self.worker_id], value)
        return family

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        yield self._counter("fairlane_claims", "Claim statements run", stats.claims)
        yield self._counter("fairlane_claimed_runs", "Runs claimed", stats.claimed)
        yield self._counter("fairlane_lease_lost", "Leases found lost", stats.lost_leases)
        yield self._counter(
            "fairlane_stale_writes", "Outcome writes the lease fence refused", stats.stale_writes
        )
        yield self._counter("fairlane_heartbeats", "Heartbeat statements run", stats.heartbeats)
        finished = CounterMetricFamily(
            "fairlane_runs_finished", "Attempts this worker ended, by outcome",
            labels=["worker", "status"],
        )  # fmt: skip
        for field, status in _FINISHED.items():
            finished.add_metric([self.worker_id, status], getattr(stats, field))
        yield finished
