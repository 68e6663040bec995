"""The context window a decision is cut for: the setting, else what the backend reports, else a small default."""

from __future__ import annotations

from pipeline.config.settings import ModelSettings
from pipeline.core.model import CountsTokens, ModelBackend, ReportsWindow
from pipeline.core.window import ESTIMATED, Window

# A model that does not say how much it reads is given the smallest window in common use, so an
# unknown model is never sent more than it can take (DPM_CONTEXT_TOKENS sets the real one).
FALLBACK_CONTEXT_TOKENS = 8_192


def context_window(settings: ModelSettings, backend: ModelBackend) -> Window:
    """DPM_CONTEXT_TOKENS, else the backend's report, else FALLBACK_CONTEXT_TOKENS; segments per DPM_SEGMENT_TOKENS.

    Counted with the model's own tokenizer where the backend has one to ask, else by estimate.
    """
    reported = backend.context_tokens() if isinstance(backend, ReportsWindow) else None
    tokens = settings.context_tokens or reported or FALLBACK_CONTEXT_TOKENS
    counter = backend.token_counter() if isinstance(backend, CountsTokens) else None
    return Window(tokens=tokens, segment_tokens=settings.segment_tokens, counter=counter or ESTIMATED)
