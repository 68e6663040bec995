"""RecordedBackend: answers from recorded audit records, so a decision is verified without any model."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.model import ModelBackendError, ModelRequest, ModelResponse, Usage, message_text


class RecordedBackend:
    """Looks each request up by its digest among recorded calls and returns the recorded bytes."""

    def __init__(self, audits: Iterable[Mapping[str, Any]]) -> None:
        self._by_digest: dict[str, Mapping[str, Any]] = {}
        self._model = "recorded"
        for audit in audits:
            self._by_digest.setdefault(audit["request_sha256"], audit)
            self._model = audit.get("model", self._model)

    @property
    def name(self) -> str:
        return "recorded"

    @property
    def model(self) -> str:
        return self._model

    def complete(self, request: ModelRequest) -> ModelResponse:
        audit = self._by_digest.get(request.digest)
        if audit is None:
            raise ModelBackendError(f"no recorded answer for request {request.digest[:16]} ({request.purpose.value})")
        raw = base64.b64decode(audit["raw_response_b64"])
        usage = audit.get("usage", {})
        return ModelResponse(
            text=message_text(raw),
            raw=raw,
            model=str(audit.get("model", self._model)),
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
            cost_usd=0.0,
            latency_s=0.0,
            stop_reason=str(audit.get("stop_reason", "end_turn")),
        )
