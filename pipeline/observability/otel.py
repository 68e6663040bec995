"""The OpenTelemetry SDK behind `DPM_TRACING=console|otlp` (imported only when tracing is on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, WrappedBackend
from pipeline.wire.headers import TRACE_HEADERS, Headers, trace_context


class _Traced:
    def __init__(self, tracer: Tracer, root: Span) -> None:
        self._tracer, self._root = tracer, root
        self._context: Context = trace.set_span_in_context(root)
        self._ended = False

    def span(self, name: str) -> AbstractContextManager[object]:
        return self._tracer.start_as_current_span(name, context=self._context)

    def output_headers(self) -> Headers:
        carrier: dict[str, str] = {}
        inject(carrier, context=self._context)
        return tuple((name, value.encode()) for name, value in carrier.items() if name in TRACE_HEADERS)

    def end(self, error: BaseException | None = None) -> None:
        """Ends the trigger's span once (a failed attempt may be ended by its slow part and by the loop)."""
        if self._ended:
            return
        self._ended = True
        if error is not None:
            self._root.record_exception(error)
            self._root.set_status(Status(StatusCode.ERROR, str(error)))
        self._root.end()


class _TracedBackend(WrappedBackend):
    """A backend whose calls are spans (`dpm.model.<purpose>`) of the span current on the calling thread."""

    def __init__(self, inner: ModelBackend, tracer: Tracer) -> None:
        super().__init__(inner)
        self._tracer = tracer

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._tracer.start_as_current_span(f"dpm.model.{request.purpose.value}") as span:
            response = self._inner.complete(request)
            span.set_attribute("dpm.tokens.input", response.usage.input_tokens)
            span.set_attribute("dpm.tokens.output", response.usage.output_tokens)
            return response


class OpenTelemetryTracing:
    """Spans through the OpenTelemetry SDK, exported in batches by `exporter`."""

    def __init__(self, exporter: SpanExporter, service: str) -> None:
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("dpm.pipeline")

    def trigger(self, headers: Sequence[tuple[str, bytes]], attributes: Mapping[str, str], /) -> _Traced:
        carrier = {name: value.decode("latin-1") for name, value in trace_context(headers)}
        root = self._tracer.start_span("dpm.trigger", context=extract(carrier), attributes=dict(attributes))
        return _Traced(self._tracer, root)

    def traced(self, backend: ModelBackend) -> ModelBackend:
        return _TracedBackend(backend, self._tracer)

    def shutdown(self) -> None:
        self._provider.shutdown()  # exports what is still buffered


def sdk_tracing(mode: str, otlp_endpoint: str, service: str) -> OpenTelemetryTracing:
    """`console`: spans printed as JSON lines on stdout; `otlp`: sent over HTTP to `otlp_endpoint`."""
    exporter: SpanExporter = ConsoleSpanExporter() if mode == "console" else OTLPSpanExporter(endpoint=otlp_endpoint)
    return OpenTelemetryTracing(exporter, service)
