"""Trace context through the projection handler: outputs continue the trigger's trace, with or without spans."""

from __future__ import annotations

from dataclasses import replace

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.memory_log import InMemoryEventLog
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.processing.steps import Deferred
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.observability.otel import OpenTelemetryTracing
from pipeline.observability.tracing import tracing_from
from pipeline.wire.event import append_events
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.projection.handler import ProjectionHandler
from tests.cases import load_fixture

NAMES = TopicNames("unit")
CASE = load_fixture()
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()


def _trigger(log: InMemoryEventLog, trigger_id: str = "t-1", budget: int = 700) -> RawRecord:
    positions = tuple(append_events(log, CASE.trajectory.events))
    request = DecisionRequest(trigger_id, CASE.ref, CASE.task, budget, (Architecture.DPM,), positions, len(positions))
    headers = (("traceparent", TRACEPARENT), ("tracestate", b"vendor=1"))
    return RawRecord(LogPosition(0, 3), CASE.ref.key.encode(), request.encode(), headers=headers)


def test_with_spans_each_stage_is_a_span_of_the_triggers_trace_and_the_outputs_continue_it() -> None:
    exporter = InMemorySpanExporter()
    tracing = OpenTelemetryTracing(exporter, "test")
    handler = ProjectionHandler(NAMES, InMemoryEventLog(), tracing.traced(ExtractiveBackend()), "w", tracing=tracing)
    outputs = handler.handle(_trigger(handler.log))  # type: ignore[arg-type]
    tracing.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"dpm.trigger", "dpm.read", "dpm.project_and_decide", "dpm.model.project",
                          "dpm.model.decide", "dpm.publish"}  # fmt: skip
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {TRACE_ID}
    root = spans["dpm.trigger"]
    assert root.parent is not None
    assert format(root.parent.span_id, "016x") == PARENT_ID  # continues the trigger's producer span
    parents = {name: span.parent.span_id for name, span in spans.items() if span.parent is not None}
    for name in ("dpm.read", "dpm.project_and_decide", "dpm.publish"):
        assert parents[name] == root.context.span_id
    for name in ("dpm.model.project", "dpm.model.decide"):
        assert parents[name] == spans["dpm.project_and_decide"].context.span_id
    expected = f"00-{TRACE_ID}-{format(root.context.span_id, '016x')}-01".encode()
    assert len(outputs) == 4  # view, decision, two audit records
    for output in outputs:
        assert dict(output.headers)["traceparent"] == expected


def test_tracing_off_passes_the_triggers_trace_context_on_unchanged_to_outputs_and_dead_letters() -> None:
    tracing = tracing_from("off", "", "test")
    handler = ProjectionHandler(NAMES, InMemoryEventLog(), tracing.traced(ExtractiveBackend()), "w", tracing=tracing)
    record = _trigger(handler.log)  # type: ignore[arg-type]
    for output in handler.handle(record):
        assert dict(output.headers)["traceparent"] == TRACEPARENT
        assert dict(output.headers)["tracestate"] == b"vendor=1"
    [letter] = handler.handle(replace(record, value=b"{not json"))
    assert dict(letter.headers)["traceparent"] == TRACEPARENT


@pytest.mark.parametrize("mode", ["console", "otlp"])
def test_every_exporter_setting_builds(mode: str) -> None:
    tracing = tracing_from(mode, "http://127.0.0.1:1/v1/traces", "test")
    assert isinstance(tracing, OpenTelemetryTracing)
    tracing.shutdown()


def test_a_trigger_whose_batch_is_consumed_again_ends_its_span_with_an_error() -> None:
    exporter = InMemorySpanExporter()
    tracing = OpenTelemetryTracing(exporter, "test")
    handler = ProjectionHandler(NAMES, InMemoryEventLog(), tracing.traced(ExtractiveBackend()), "w", tracing=tracing)
    step = handler.start(_trigger(handler.log))  # type: ignore[arg-type]
    assert isinstance(step, Deferred)
    step.slow()
    step.abandon()  # the loop does this instead of finishing: another record of the batch failed
    step.abandon()  # ends once
    tracing.shutdown()
    [root] = [s for s in exporter.get_finished_spans() if s.name == "dpm.trigger"]
    assert root.status.status_code is StatusCode.ERROR
    assert "consumed again" in (root.status.description or "")
