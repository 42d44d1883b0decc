"""Traces: a trigger is a producer span, a run a consumer span under it, and runs a handler
triggers join the same trace, as the SDK's in-memory exporter records them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from fairlane import AsyncClient, RunContext, TaskRegistry, Worker, tracing
from fairlane.tracing import TRACE_KEY
from tests.helpers import run_status, running, wait_until

pytestmark = pytest.mark.anyio

EXPORTER = InMemorySpanExporter()


@pytest.fixture(autouse=True)
def tracer_provider() -> Iterator[None]:
    # fairlane's own provider, not the global one: other tests' runs stay untraced.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    tracing.use_tracer_provider(provider)
    yield
    tracing.use_tracer_provider(None)


async def test_one_trace_shows_the_trigger_the_parent_and_its_child(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    EXPORTER.clear()
    tasks = TaskRegistry()

    @tasks.task("child")
    async def child(ctx: RunContext, payload: Any) -> int:
        return 2

    @tasks.task("parent")
    async def parent(ctx: RunContext, payload: Any) -> Any:
        return (await ctx.trigger_and_wait("child", None)).output

    async with AsyncClient(dsn) as client, running(Worker(tasks, dsn)):
        run_id = await client.trigger("parent", None, environment="acme")
        await wait_until(lambda: run_status(db, run_id) == "COMPLETED", what="parent done")
        run = await client.get_run(run_id)
    assert run.metadata[TRACE_KEY].startswith("00-")

    spans = EXPORTER.get_finished_spans()
    by_name: dict[tuple[str, str], Any] = {}
    for span in spans:
        task = span.attributes.get("fairlane.task") if span.attributes else None
        by_name[(span.name, str(task))] = span
    trigger_parent = by_name[("fairlane.trigger", "parent")]
    run_parent = by_name[("fairlane.run", "parent")]
    trigger_child = by_name[("fairlane.trigger", "child")]
    run_child = by_name[("fairlane.run", "child")]
    assert {
        span.context.trace_id for span in (trigger_parent, run_parent, trigger_child, run_child)
    } == {trigger_parent.context.trace_id}
    assert trigger_parent.kind is SpanKind.PRODUCER
    assert run_parent.kind is SpanKind.CONSUMER
    # Each span's parent is the one before it: trigger, run, child's trigger, child's run.
    chain = [trigger_parent, run_parent, trigger_child, run_child]
    for earlier, later in pairwise(chain):
        assert later.parent is not None
        assert later.parent.span_id == earlier.context.span_id
    produced, consumed = dict(trigger_parent.attributes or {}), dict(run_parent.attributes or {})
    assert produced["fairlane.run_id"] == run_id
    assert consumed["fairlane.run_id"] == run_id
    assert consumed["fairlane.attempt"] == 1
    assert consumed["fairlane.environment"] == "acme"
    assert consumed["fairlane.status"] == "COMPLETED"


async def test_a_provider_set_while_the_worker_runs_traces_the_runs_claimed_after(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    # The worker asks for the tracer once per claim, not once for its life.
    EXPORTER.clear()
    tracing.use_tracer_provider(None)
    tasks = TaskRegistry()

    @tasks.task("step")
    async def step(ctx: RunContext, payload: Any) -> None:
        return None

    async with AsyncClient(dsn) as client, running(Worker(tasks, dsn)):
        untraced = await client.trigger("step", None)
        await wait_until(lambda: run_status(db, untraced) == "COMPLETED", what="first run done")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        tracing.use_tracer_provider(provider)
        traced = await client.trigger("step", None)
        await wait_until(lambda: run_status(db, traced) == "COMPLETED", what="second run done")
    run_ids = {
        (span.attributes or {}).get("fairlane.run_id")
        for span in EXPORTER.get_finished_spans()
        if span.name == "fairlane.run"
    }
    assert run_ids == {traced}
