"""The model port: what a backend is asked and what it answers, for any backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import orjson

from pipeline.core.errors import DpmError
from pipeline.core.hashing import json_digest, sha256_hex
from pipeline.core.window import TokenCounter


class ModelBackendError(DpmError):
    """A backend could not produce a response (after its own retries)."""


class Purpose(StrEnum):
    """Why a model is called; part of the request, so audit records say it."""

    PROJECT = "project"
    DECIDE = "decide"
    SUMMARIZE = "summarize"
    JUDGE = "judge"


@dataclass(frozen=True)
class ModelRequest:
    """One single-turn request at a fixed temperature."""

    purpose: Purpose
    system: str
    prompt: str
    max_tokens: int
    temperature: float = 0.0

    def wire(self) -> dict[str, Any]:
        """The request as recorded for audit and hashed as the prompt digest."""
        return {
            "purpose": self.purpose.value,
            "system": self.system,
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    @property
    def digest(self) -> str:
        return json_digest(self.wire())

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ModelRequest:
        return cls(
            purpose=Purpose(wire["purpose"]),
            system=wire["system"],
            prompt=wire["messages"][0]["content"],
            max_tokens=int(wire["max_tokens"]),
            temperature=float(wire["temperature"]),
        )


@dataclass(frozen=True)
class Usage:
    """Tokens of one call (or summed over several), as the provider reported them.

    `input_tokens` counts every input token, cached or not; of those, `cache_write_tokens` were
    written to the provider's prompt cache and `cache_read_tokens` served from it (each priced
    apart, pricing.py). A provider that reports no cache fields leaves both 0.
    """

    input_tokens: int
    output_tokens: int
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_write_tokens + other.cache_write_tokens,
                     self.cache_read_tokens + other.cache_read_tokens)  # fmt: skip

    def wire(self) -> dict[str, int]:
        """The `usage` object of audit and decision records; cache fields only when the provider reported some."""
        value = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.cache_write_tokens or self.cache_read_tokens:
            value |= {"cache_write_input_tokens": self.cache_write_tokens,
                      "cache_read_input_tokens": self.cache_read_tokens}  # fmt: skip
        return value

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> Usage:
        def tokens(name: str) -> int:
            return int(value.get(name, 0))

        return cls(tokens("input_tokens"), tokens("output_tokens"), tokens("cache_write_input_tokens"),
                   tokens("cache_read_input_tokens"))  # fmt: skip


class ResponseFormat(StrEnum):
    """How a provider lays out its raw response body; each backend names its own, and audit records say it."""

    ANTHROPIC_MESSAGES = "anthropic-messages"
    OPENAI_CHAT = "openai-chat"


@dataclass(frozen=True)
class ModelResponse:
    """A backend's answer: the text, the exact response bytes (in `format`) and what it cost.

    `serving` names what produced it beyond the model id, as the provider or server reports it
    (system fingerprint, server build, model file digest, threads), for the audit record.
    """

    text: str
    raw: bytes
    model: str
    usage: Usage
    cost_usd: float
    latency_s: float
    stop_reason: str
    format: ResponseFormat = ResponseFormat.ANTHROPIC_MESSAGES
    serving: tuple[tuple[str, str], ...] = ()

    @property
    def raw_digest(self) -> str:
        return sha256_hex(self.raw)


def response_text(raw: bytes, layout: ResponseFormat) -> str:
    """The answer text inside a raw response body of the given format; raises ModelBackendError otherwise.

    Messages API: the text blocks joined. Chat Completions: the first choice's message content.
    A recorded answer is re-read this way, so its view is re-derived from the bytes the provider sent.
    """
    try:
        body = orjson.loads(raw)
        if layout is ResponseFormat.OPENAI_CHAT:
            content = body["choices"][0]["message"].get("content")
            return content if isinstance(content, str) else ""
        return "".join(b["text"] for b in body["content"] if b.get("type") == "text")
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelBackendError(f"response body is not a {layout.value} body: {exc!r}") from exc


class ModelBackend(Protocol):
    """A model: deterministic offline, a hosted API, or a replay of recorded answers."""

    @property
    def name(self) -> str:
        """Backend id: extractive, anthropic, recorded."""
        ...

    @property
    def model(self) -> str:
        """Model id recorded with every decision."""
        ...

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answers one request; raises ModelBackendError when it cannot."""
        ...


@runtime_checkable
class ReportsWindow(Protocol):
    """A backend that knows its model's context window."""

    def context_tokens(self) -> int | None:
        """The window in tokens, or None when it cannot tell."""
        ...


@runtime_checkable
class CountsTokens(Protocol):
    """A backend that can count tokens with its model's own tokenizer."""

    def token_counter(self) -> TokenCounter | None:
        """The tokenizer, or None when this backend's server has none to ask."""
        ...


@runtime_checkable
class Fingerprinted(Protocol):
    """A backend that can tell which build of its model answers (a model file's digest, say)."""

    def fingerprint(self) -> str | None:
        """What tells this model's build from another under the same id, or None when nothing does."""
        ...


def model_identity(backend: ModelBackend) -> str:
    """The model id, and its fingerprint where the backend has one: what a stored answer is valid for."""
    fingerprint = backend.fingerprint() if isinstance(backend, Fingerprinted) else None
    return backend.model if not fingerprint else f"{backend.model}@{fingerprint}"


class WrappedBackend:
    """Base of a backend that wraps another (latency, tracing): it answers under the wrapped one's name and model."""

    def __init__(self, inner: ModelBackend) -> None:
        self._inner = inner

    def context_tokens(self) -> int | None:
        return self._inner.context_tokens() if isinstance(self._inner, ReportsWindow) else None

    def token_counter(self) -> TokenCounter | None:
        return self._inner.token_counter() if isinstance(self._inner, CountsTokens) else None

    def fingerprint(self) -> str | None:
        return self._inner.fingerprint() if isinstance(self._inner, Fingerprinted) else None

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def model(self) -> str:
        return self._inner.model
