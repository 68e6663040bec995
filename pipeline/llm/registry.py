"""The table of model backends: a name, and where its factory lives.

Adding a backend touches its own module (which defines `from_settings`) and one line here.
Factories are imported when chosen, so a model SDK loads only in a process that uses it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Protocol

from pipeline.config.settings import ModelSettings
from pipeline.core.model import ModelBackend, ModelBackendError
from pipeline.core.run import ModelCall
from pipeline.llm.cache_warming import CacheWarmingBackend
from pipeline.llm.latency import LatencyBackend


class BackendFactory(Protocol):
    def __call__(self, settings: ModelSettings, recorded: Sequence[ModelCall]) -> ModelBackend:
        """A backend from the settings; `recorded` holds a decision's recorded calls (for replays)."""
        ...


BACKENDS: dict[str, str] = {
    "extractive": "pipeline.llm.extractive.backend:from_settings",
    "anthropic": "pipeline.llm.anthropic_backend:from_settings",
    "openai": "pipeline.llm.openai_backend:from_settings",
    "recorded": "pipeline.llm.recorded:from_settings",
}


def backend_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(BACKENDS)


def factory(name: str) -> BackendFactory:
    """The factory registered under `name`; a clear error for an unknown name."""
    where = BACKENDS.get(name)
    if where is None:
        raise ModelBackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, attribute = where.partition(":")
    built: BackendFactory = getattr(importlib.import_module(module), attribute)
    return built


# Backends whose provider keeps a prompt cache that a call's answer fills (cache_warming.py).
CACHING_BACKENDS = ("anthropic", "openai")


def make_backend(settings: ModelSettings, recorded: Sequence[ModelCall] = ()) -> ModelBackend:
    """The backend `settings.backend` names, built from the settings (slowed down when a latency is set).

    A hosted backend sends calls that would write the same cache entry one after another.
    """
    backend = factory(settings.backend)(settings, recorded)
    if settings.latency_ms or settings.latency_jitter_ms:
        backend = LatencyBackend(backend, settings.latency_ms, settings.latency_jitter_ms)
    if settings.backend in CACHING_BACKENDS:
        backend = CacheWarmingBackend(backend, max_wait_s=settings.worst_call_s())
    return backend
