"""Counts tokens with a llama.cpp server's own tokenizer (`POST /tokenize`), for windows that must not overflow.

Small models' tokenizers cut figures and identifiers much finer than the 3-characters-per-token
estimate assumes (SmolLM2: 2 characters per token in staff notes), so a window counted by estimate
would overflow on them. Counts are cached by text: a re-decision counts the same event lines again.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from collections.abc import Sequence

import orjson
from cachetools import LRUCache

from pipeline.core.model import ModelBackendError

_CACHED_TEXTS = 100_000


class LlamaTokenizer:
    """A TokenCounter asking a llama.cpp server; raises ModelBackendError when the server does not answer."""

    def __init__(self, root_url: str, name: str, timeout_s: float = 30.0) -> None:
        if not root_url.startswith(("http://", "https://")):
            raise ModelBackendError(f"a tokenizer is asked over HTTP, not at {root_url!r}")
        self._url = f"{root_url.rstrip('/')}/tokenize"
        self._name = name
        self._timeout_s = timeout_s
        self._counts: LRUCache[bytes, int] = LRUCache(maxsize=_CACHED_TEXTS)

    @property
    def name(self) -> str:
        return self._name

    def count(self, texts: Sequence[str]) -> list[int]:
        return [self._count(text) for text in texts]

    def _count(self, text: str) -> int:
        key = hashlib.sha256(text.encode("utf-8")).digest()
        cached = self._counts.get(key)
        if cached is None:
            cached = self._counts[key] = len(self._tokens(text))
        return cached

    def _tokens(self, text: str) -> list[object]:
        body = orjson.dumps({"content": text, "add_special": False})
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self._url, data=body, headers=headers)  # noqa: S310 - the configured server
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:  # noqa: S310 - the configured server
                tokens = orjson.loads(answer.read())["tokens"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelBackendError(f"the server's tokenizer at {self._url} did not answer: {exc}") from exc
        if not isinstance(tokens, list):
            raise ModelBackendError(f"the server's tokenizer at {self._url} answered without a token list")
        return tokens


def llama_tokenizer(root_url: str, model: str, model_sha256: str | None) -> LlamaTokenizer | None:
    """The server's tokenizer when it has one (it answers `/tokenize`), named after the model it serves."""
    name = f"llama.cpp tokenizer of {model}" + (f" (sha256 {model_sha256[:16]})" if model_sha256 else "")
    tokenizer = LlamaTokenizer(root_url, name, timeout_s=5)
    try:
        tokenizer.count(["probe"])
    except ModelBackendError:
        return None
    return LlamaTokenizer(root_url, name)
