"""Builds the configured model backend from settings (DPM_BACKEND and friends)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.model import ModelBackend, ModelBackendError
from pipeline.llm.anthropic_backend import DEFAULT_MODEL, AnthropicBackend
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.llm.pricing import load_price_table

BACKENDS = ("extractive", "anthropic")


@dataclass(frozen=True)
class BackendSettings:
    """Which backend to use and how to reach it.

    Environment: DPM_BACKEND (extractive|anthropic), DPM_MODEL, ANTHROPIC_API_KEY,
    ANTHROPIC_BASE_URL, DPM_PRICE_TABLE (JSON prices), DPM_MODEL_TIMEOUT_S, DPM_MODEL_MAX_RETRIES.
    """

    backend: str = "extractive"
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    base_url: str | None = None
    price_table: Path | None = None
    timeout_s: float = 120.0
    max_retries: int = 4

    @classmethod
    def from_env(cls, backend: str | None = None) -> BackendSettings:
        env = os.environ
        return cls(
            backend=backend or env.get("DPM_BACKEND", "extractive"),
            model=env.get("DPM_MODEL", DEFAULT_MODEL),
            api_key=env.get("ANTHROPIC_API_KEY"),
            base_url=env.get("ANTHROPIC_BASE_URL"),
            price_table=Path(env["DPM_PRICE_TABLE"]) if env.get("DPM_PRICE_TABLE") else None,
            timeout_s=float(env.get("DPM_MODEL_TIMEOUT_S", "120")),
            max_retries=int(env.get("DPM_MODEL_MAX_RETRIES", "4")),
        )


def make_backend(settings: BackendSettings) -> ModelBackend:
    """The backend `settings` name; a clear error for an unknown name or a missing API key."""
    if settings.backend == "extractive":
        return ExtractiveBackend()
    if settings.backend == "anthropic":
        if not settings.api_key:
            raise ModelBackendError("the anthropic backend needs ANTHROPIC_API_KEY")
        return AnthropicBackend(
            settings.api_key,
            settings.model,
            base_url=settings.base_url,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            prices=load_price_table(settings.price_table),
        )
    raise ModelBackendError(f"unknown backend {settings.backend!r}; choose one of {', '.join(BACKENDS)}")
