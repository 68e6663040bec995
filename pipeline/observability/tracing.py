"""Trace context through the projection worker: W3C `traceparent` from a trigger to every output record.

Off (the default), a trigger's `traceparent` and `tracestate` headers are copied to its outputs
unchanged when they are valid W3C trace context (wire.headers.trace_context; invalid ones are
dropped): nothing is imported, no span is made. On (`DPM_TRACING=console` or `otlp`), each
trigger gets a `dpm.trigger` span continuing the trigger's trace, with `dpm.read`,
`dpm.project_and_decide` (holding one `dpm.model.project` and one `dpm.model.decide` span) and
`dpm.publish` inside it, and its outputs carry a `traceparent` of that trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from pipeline.core.model import ModelBackend
from pipeline.wire.headers import Headers, trace_context


class TriggerTrace(Protocol):
    """The trace of one trigger's handling."""

    def span(self, name: str) -> AbstractContextManager[object]:
        """A child span of the trigger's, current on this thread while the block runs."""
        ...

    def output_headers(self) -> Headers:
        """The trace context headers every output of the trigger carries."""
        ...

    def end(self, error: BaseException | None = None) -> None: ...


class Tracing(Protocol):
    def trigger(self, headers: Sequence[tuple[str, bytes]], attributes: Mapping[str, str], /) -> TriggerTrace: ...

    def traced(self, backend: ModelBackend) -> ModelBackend:
        """`backend` with a span around each call (itself when tracing is off)."""
        ...

    def shutdown(self) -> None: ...


class _PassedOn:
    """Tracing off: the trigger's own trace context goes on to the outputs; no span."""

    def __init__(self, headers: Sequence[tuple[str, bytes]]) -> None:
        self._headers = trace_context(headers)

    def span(self, _name: str) -> AbstractContextManager[object]:
        return nullcontext()

    def output_headers(self) -> Headers:
        return self._headers

    def end(self, error: BaseException | None = None) -> None:
        pass


class PassThroughTracing:
    def trigger(self, headers: Sequence[tuple[str, bytes]], _attributes: Mapping[str, str], /) -> TriggerTrace:
        return _PassedOn(headers)

    def traced(self, backend: ModelBackend) -> ModelBackend:
        return backend

    def shutdown(self) -> None:
        pass


def tracing_from(mode: str, otlp_endpoint: str, service: str) -> Tracing:
    """The tracing a worker runs with: `off`, `console` (spans printed as JSON) or `otlp` (HTTP)."""
    if mode == "off":
        return PassThroughTracing()
    from pipeline.observability import otel  # noqa: PLC0415 - the SDK is loaded only when tracing is on

    return otel.sdk_tracing(mode, otlp_endpoint, service)
