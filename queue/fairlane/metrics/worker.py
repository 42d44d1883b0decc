"""A worker's own series, on a registry of its own (two workers in one process never share a
series): the counters its ``WorkerStats`` keeps, read at each scrape, and what needs labels or
buckets, recorded as it happens: how long each attempt and claim took, the periodic jobs this
worker ran and what they repaired, the batch items its carriers decided.

A worker reports only what it did itself, so summed over workers each series is the
deployment's: every outcome is counted by the worker whose write the fence accepted, and every
periodic job's tick by the one worker that ran it. The worker's id is a label of
``fairlane_worker_info`` only: a label of every series would start new series at each restart,
and the scrape's target labels tell workers apart already.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, Metric

from fairlane.engine.maintenance import JobsRan
from fairlane.maintenance.jobs import REPAIR_KINDS, repairs_in
from fairlane.metrics.runs import RunOutcomes
from fairlane.worker.stats import WorkerStats

# Handlers run from milliseconds to hours (a series per bucket, task and status: few buckets);
# claims and maintenance ticks take milliseconds.
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
JOB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# What a carrier makes of a batch item: its run, a pre-failed run, or nothing (batch aborted).
BATCH_ITEM_STATES = ("TRIGGERED", "FAILED", "SKIPPED")


class StatsCollector:
    """The counters of a worker's ``WorkerStats``, read at each scrape."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats
        yield _counter("fairlane_claims", "Claim statements sent", stats.claims)
        yield _counter("fairlane_claimed_runs", "Runs claimed", stats.claimed)
        yield _counter(
            "fairlane_lease_lost", "Leases found lost while their handler ran", stats.lost_leases
        )
        yield _counter(
            "fairlane_stale_writes", "Outcome writes the lease fence refused", stats.stale_writes
        )
        yield _counter("fairlane_heartbeats", "Heartbeat statements run", stats.heartbeats)
        yield _counter(
            "fairlane_worker_detached_waits",
            "Waiting handlers whose run let go of the worker (it waits with no lease)",
            stats.detached,
        )
        yield _counter(
            "fairlane_worker_replays",
            "Executions of runs with recorded steps or waits to replay",
            stats.replays,
        )
        steps = CounterMetricFamily(
            "fairlane_worker_steps",
            "Steps (ctx.step) whose function ran, or that a replay served from their record",
            labels=["how"],
        )
        steps.add_metric(["executed"], stats.steps_executed)
        steps.add_metric(["replayed"], stats.steps_replayed)
        yield steps


def _counter(name: str, text: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


class WorkerMetrics:
    def __init__(self, stats: WorkerStats, worker_id: str) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StatsCollector(stats))
        Info("fairlane_worker", "The worker these series are of", registry=self.registry).info(
            {"worker_id": worker_id}
        )
        self.runs = RunOutcomes(RUN_BUCKETS)
        self.registry.register(self.runs)
        self.claim_duration = Histogram(
            "fairlane_claim_duration_seconds",
            "Round trip of the claim statement",
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        )
        self.periodic_job_duration = Histogram(
            "fairlane_periodic_job_duration_seconds",
            "How long the periodic jobs this worker ran took, by job",
            ["job"],
            buckets=JOB_BUCKETS,
            registry=self.registry,
        )
        self.repairs = Counter(
            "fairlane_repairs",
            "What the periodic jobs this worker ran put right, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.batch_items = Counter(
            "fairlane_batch_items",
            "Batch items this worker's carriers decided, by the state they reached",
            ["state"],
            registry=self.registry,
        )
        # Known label values start at zero, so that rate() sees the first increase.
        for kind in REPAIR_KINDS:
            self.repairs.labels(kind)
        for state in BATCH_ITEM_STATES:
            self.batch_items.labels(state)

    def run_finished(self, task: str, status: str, seconds: float) -> None:
        """An attempt ended: COMPLETED, FAILED, RETRIED, TIMED_OUT (written and accepted by
        the fence), RELEASED (handed back at shutdown) or CANCELED (its handler stopped)."""
        self.runs_finished(task, status, (seconds,))

    def runs_finished(self, task: str, status: str, durations: Iterable[float]) -> None:
        """``run_finished`` for attempts of one task that ended alike (a written batch)."""
        self.runs.record(task, status, durations)

    def claimed(self, seconds: float) -> None:
        self.claim_duration.observe(seconds)

    def periodic_jobs_ran(self, ran: JobsRan) -> None:
        for job, seconds in ran.seconds.items():
            self.periodic_job_duration.labels(job).observe(seconds)
        for kind, count in repairs_in(ran.results).items():
            self.repairs.labels(kind).inc(count)

    def batch_item(self, state: str) -> None:
        self.batch_items.labels(state).inc()
