"""ExtractiveBackend: answers projection, summarization and decision prompts offline, byte-deterministically."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from pipeline.config.settings import ModelSettings
from pipeline.core.hashing import canonical_json
from pipeline.core.model import ModelBackendError, ModelRequest, ModelResponse, Purpose, Usage
from pipeline.core.prompt import (
    PromptFormatError,
    is_merge_prompt,
    read_decision_prompt,
    read_merge_prompt,
    read_projection_prompt,
    read_summarization_prompt,
)
from pipeline.core.run import ModelCall
from pipeline.llm.extractive.writers import decide, merge, project, summarize

# Bump when the algorithm's output changes, so replays against an older record report DRIFT honestly.
MODEL_ID = "extractive-v2"
_CHARS_PER_TOKEN = 4
# The offline backend reads any length; it takes a hosted model's window so that a case is cut into
# segments where a hosted model's would be (DPM_CONTEXT_TOKENS sets another).
OFFLINE_CONTEXT_TOKENS = 200_000


def _tokens(text: str) -> int:
    """Token count estimate (about 4 characters per token), for comparable usage figures."""
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


class ExtractiveBackend:
    """The default backend: no network, no randomness, same bytes for the same request."""

    @property
    def name(self) -> str:
        return "extractive"

    @property
    def model(self) -> str:
        return MODEL_ID

    def context_tokens(self) -> int:
        return OFFLINE_CONTEXT_TOKENS

    def answer(self, request: ModelRequest) -> str:
        """The answer text for a request this project's prompts produced."""
        try:
            if request.purpose is Purpose.PROJECT and is_merge_prompt(request.prompt):
                return merge(read_merge_prompt(request.prompt)).render()
            if request.purpose is Purpose.PROJECT:
                return project(read_projection_prompt(request.prompt)).render()
            if request.purpose is Purpose.SUMMARIZE:
                return summarize(read_summarization_prompt(request.prompt)).render()
            if request.purpose is Purpose.DECIDE:
                return decide(read_decision_prompt(request.prompt))
            raise ModelBackendError(f"the extractive backend does not answer {request.purpose.value} requests")
        except PromptFormatError as exc:
            raise ModelBackendError(f"the extractive backend cannot read this prompt: {exc}") from exc

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        text = self.answer(request)
        usage = Usage(_tokens(request.system) + _tokens(request.prompt), _tokens(text))
        body = {
            "id": f"msg_extractive_{request.digest[:24]}",
            "type": "message",
            "role": "assistant",
            "model": MODEL_ID,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        }
        return ModelResponse(
            text=text,
            raw=canonical_json(body),
            model=MODEL_ID,
            usage=usage,
            cost_usd=0.0,
            latency_s=time.perf_counter() - started,
            stop_reason="end_turn",
        )


def from_settings(settings: ModelSettings, recorded: Sequence[ModelCall]) -> ExtractiveBackend:
    """The offline backend needs no settings."""
    del settings, recorded
    return ExtractiveBackend()
