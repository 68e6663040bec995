"""Prometheus metrics of the workers and the baseline, served over HTTP by prometheus-client."""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from pipeline.core.domains import DOMAINS
from pipeline.core.errors import DpmError
from pipeline.core.model import Purpose
from pipeline.core.run import ModelCall, RunResult
from pipeline.core.task import Architecture
from pipeline.wire.rejection import Rejection

_LOG = logging.getLogger("pipeline.metrics")


class MetricsPortInUseError(DpmError):
    """The /metrics port is taken: the process does not start (one line, naming the setting)."""


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OTHER_TENANT = "other"
# Outcome labels come from a fixed set: a trigger's label space is the sender's to choose, and a
# label value per distinct string would let one sender grow the series without bound.
KNOWN_OUTCOMES = frozenset(label for rules in DOMAINS.values() for label in rules.label_space) | {
    "REFER", "PEND", "REVIEW"}  # fmt: skip


def outcome_label(label: str | None) -> str:
    """The decision's label for the outcome label: a known one, else `other` (`failed` when there is none)."""
    if label is None:
        return "failed"
    return label if label in KNOWN_OUTCOMES else "other"


class PipelineMetrics:
    """Every metric the processes export; tenant labels only for tenants named in the configuration.

    Unbounded label values (every tenant of a bank) would explode Prometheus' series count, so a
    tenant outside `tenants` is counted as "other".
    """

    def __init__(self, tenants: Iterable[str] = (), registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._tenants = frozenset(tenants)
        r = self.registry
        self.decisions = Counter("dpm_decisions", "Decisions published", ["architecture", "outcome", "tenant"],
                                 registry=r)  # fmt: skip
        self.memory_seconds = Histogram("dpm_memory_build_seconds", "Projection (DPM) or summary steps (Summ-only)",
                                        ["architecture"], buckets=_LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.decision_seconds = Histogram("dpm_decision_call_seconds", "The decision call", ["architecture"],
                                          buckets=_LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.end_to_end_seconds = Histogram("dpm_end_to_end_seconds", "Trigger appended to decision published",
                                            ["architecture"], buckets=_LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.model_calls = Counter("dpm_model_calls", "Model calls", ["architecture", "model", "purpose"], registry=r)
        self.input_tokens = Counter("dpm_model_input_tokens", "Input tokens", ["architecture", "model"], registry=r)
        self.output_tokens = Counter("dpm_model_output_tokens", "Output tokens", ["architecture", "model"], registry=r)
        self.cost = Counter("dpm_model_cost_usd", "Model spend in US dollars", ["architecture", "model"], registry=r)
        self.replays = Counter("dpm_replay_results", "Self-verification of published decisions", ["outcome"],
                               registry=r)  # fmt: skip
        self.dead_letters = Counter("dpm_dead_letters", "Records sent to the DLQ", ["reason"], registry=r)
        self.isolation_violations = Counter("dpm_isolation_violations", "Triggers naming another tenant's events",
                                            registry=r)  # fmt: skip
        self.lag = Gauge("dpm_consumer_lag", "Records behind the high watermark", ["group", "topic", "partition"],
                         registry=r)  # fmt: skip
        for reason in Rejection:  # export zeros, so rate() and alerts work before the first dead letter
            self.dead_letters.labels(reason.value)

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self._tenants else OTHER_TENANT

    def observe_calls(self, architecture: Architecture, calls: Iterable[ModelCall]) -> None:
        """Counts model calls, their tokens and their cost."""
        arch = architecture.value
        for call in calls:
            model = call.response.model
            self.model_calls.labels(arch, model, call.request.purpose.value).inc()
            self.input_tokens.labels(arch, model).inc(call.response.usage.input_tokens)
            self.output_tokens.labels(arch, model).inc(call.response.usage.output_tokens)
            self.cost.labels(arch, model).inc(call.response.cost_usd)

    def observe_run(
        self, result: RunResult, tenant: str, end_to_end_s: float | None, *, calls_counted_already: int = 0
    ) -> None:
        """Counts a published decision and those of its model calls not counted when they were made."""
        arch = result.architecture.value
        self.decisions.labels(arch, outcome_label(result.decision.label), self.tenant_label(tenant)).inc()
        memory = [c for c in result.calls if c.request.purpose is not Purpose.DECIDE]
        self.memory_seconds.labels(arch).observe(sum(c.response.latency_s for c in memory))
        self.decision_seconds.labels(arch).observe(result.calls[-1].response.latency_s)
        if end_to_end_s is not None:
            self.end_to_end_seconds.labels(arch).observe(max(0.0, end_to_end_s))
        self.observe_calls(result.architecture, result.calls[calls_counted_already:])

    def observe_rejection(self, reason: Rejection) -> None:
        self.dead_letters.labels(reason.value).inc()
        if reason is Rejection.CROSS_TENANT:
            self.isolation_violations.inc()

    def observe_lag(self, group: str, topic: str, lags: Mapping[int, int]) -> None:
        for partition, lag in lags.items():
            self.lag.labels(group, topic, str(partition)).set(lag)

    def serve(self, port: int, addr: str = "127.0.0.1", health: Callable[[], tuple[bool, str]] | None = None) -> Any:  # noqa: ANN401
        """Serves /metrics and /healthz (503 when `health` says so) on addr:port; returns the server for shutdown."""
        metrics_app = make_wsgi_app(self.registry)

        def app(request: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            # `request` is the WSGI environment of one HTTP request, not the process environment
            if request.get("PATH_INFO") == "/healthz":
                ok, detail = health() if health is not None else (True, "ok")
                start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
                return [detail.encode()]
            body: Iterable[bytes] = metrics_app(request, start_response)
            return body

        try:
            server = make_server(addr, port, app, _ThreadingWSGIServer, handler_class=_QuietHandler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise MetricsPortInUseError(
                f"the metrics port {addr}:{port} is in use (another worker or baseline on this host?): "
                "choose another with --metrics-port or DPM_METRICS_PORT (-1: no metrics)"
            ) from exc
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        _LOG.info("metrics on %s:%d/metrics, health on /healthz", addr, port)
        return server


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: ANN401 - the base class's signature
        """Scrapes are not worth a log line each."""


class Liveness:
    """Whether a worker's loop still turns: /healthz fails once it has not turned for `max_stall_s`.

    An idle loop turns every half second, and a loop waiting for model calls turns every second
    while it waits, so a long batch is not a stall; a loop stuck inside a call that does not
    return is (DPM_HEALTH_STALL_S, default one minute).
    """

    def __init__(self, max_stall_s: float) -> None:
        self.max_stall_s = max_stall_s
        self._last_turn = time.monotonic()

    def turned(self) -> None:
        self._last_turn = time.monotonic()

    def check(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self._last_turn
        if stalled > self.max_stall_s:
            return False, f"no progress for {stalled:.0f} s (limit {self.max_stall_s:.0f} s)"
        return True, f"ok: last turn {stalled:.1f} s ago"
