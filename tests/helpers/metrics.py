"""Reading Prometheus series in tests: a registry's text or an endpoint's, as samples by name
and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text, by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(*collectors: Collector) -> Samples:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return samples(generate_latest(registry).decode())


def scrape_endpoint(port: int) -> Samples:
    """GET /metrics of an endpoint on this machine (blocking: call it from a thread)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.headers.get_content_type() == "text/plain"
        return samples(response.read().decode())


def labelled(found: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``."""
    return found[(name, tuple(sorted(labels.items())))]
