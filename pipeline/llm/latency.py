"""A wrapper that makes any backend answer as slowly as a hosted model, without using CPU.

For tests and benchmarks on a small machine: the wrapped backend's responses pass through
unchanged (views and decisions stay byte-identical), only later. The wait is the set latency
plus a jitter drawn from the request's digest, so the same request always waits the same time
in any process, and it sleeps, so scale-out can be measured on two cores.
"""

from __future__ import annotations

import dataclasses
import time

from pipeline.core.model import ModelBackend, ModelRequest, ModelResponse, WrappedBackend


class LatencyBackend(WrappedBackend):
    """`inner`, answering after `latency_ms` plus up to `jitter_ms` more (seeded by the request)."""

    def __init__(self, inner: ModelBackend, latency_ms: int, jitter_ms: int = 0) -> None:
        super().__init__(inner)
        self._latency_ms = latency_ms
        self._jitter_ms = jitter_ms

    def delay_s(self, request: ModelRequest) -> float:
        """The wait for `request`: fixed for a given request, set latency and digest-drawn jitter."""
        jitter = int(request.digest[:8], 16) % (self._jitter_ms + 1) if self._jitter_ms else 0
        return (self._latency_ms + jitter) / 1000

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        response = self._inner.complete(request)
        remaining = self.delay_s(request) - (time.perf_counter() - started)
        if remaining > 0:
            time.sleep(remaining)
        return dataclasses.replace(response, latency_s=time.perf_counter() - started)
