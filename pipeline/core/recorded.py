"""RecordedAnswers: a model backend that answers from a decision's recorded calls, never from a model."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pipeline.core.model import ModelBackendError, ModelRequest, ModelResponse
from pipeline.core.run import ModelCall

RECORDED_BACKEND = "recorded"


class RecordedAnswers:
    """Looks each request up by its digest among recorded calls and returns the recorded response.

    A replayed answer costs nothing and takes no time, so both are zero in what it returns.
    """

    def __init__(self, calls: Iterable[ModelCall]) -> None:
        self._by_digest: dict[str, ModelResponse] = {}
        self._model = RECORDED_BACKEND
        for call in calls:
            self._by_digest.setdefault(call.request.digest, call.response)
            self._model = call.response.model

    @property
    def name(self) -> str:
        return RECORDED_BACKEND

    @property
    def model(self) -> str:
        return self._model

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = self._by_digest.get(request.digest)
        if response is None:
            raise ModelBackendError(f"no recorded answer for request {request.digest[:16]} ({request.purpose.value})")
        return replace(response, cost_usd=0.0, latency_s=0.0)
