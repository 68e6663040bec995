"""OpenAIBackend: Chat Completions through the official SDK against any OpenAI-compatible server.

vLLM, SGLang, llama.cpp, Ollama, TGI and hosted OpenAI-compatible APIs all serve `/v1/chat/completions`.
Requests go at temperature 0 with a fixed seed and, where the server enforces it, a JSON schema for
the answer (the view, the summary, the decision); a server that refuses either is asked again
without it, once, and plain prompting is used from then on. The SDK retries 408/409/429/5xx and
connection errors with backoff, honouring retry-after; what still fails is wrapped.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import openai
import orjson
import pydantic
from openai.types.chat import ChatCompletion

from pipeline.config.settings import ModelSettings
from pipeline.core.hashing import sha256_hex
from pipeline.core.model import (
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    Purpose,
    ResponseFormat,
    Usage,
    response_text,
)
from pipeline.core.prompt import (
    CACHE_BLOCK_CHARS,
    PromptFormatError,
    PromptLayout,
    decision_request,
    prompt_layout,
    read_decision_prompt,
)
from pipeline.core.run import ModelCall
from pipeline.core.structured import VIEW_SCHEMA, decision_schema
from pipeline.core.task import TaskSpec
from pipeline.core.view import EMPTY_VIEW
from pipeline.core.window import TokenCounter, estimated_tokens
from pipeline.llm.failures import OFFLINE, Cause, Endpoint, connection_cause, status_cause
from pipeline.llm.llama_tokenizer import llama_tokenizer
from pipeline.llm.pacing import Pacing, retry_timeout
from pipeline.llm.pricing import Price, load_price_table

DEFAULT_SEED = 0
_LOG = logging.getLogger("pipeline.llm.openai")
_IDLE_WAIT_S = 900.0  # the longest a retry waits for the server to finish a call it gave up on
_MAX_BACKOFF_S = 8.0
# What the speed of a one-slot server is measured with: a decision over an empty view, with a short
# answer, so it costs a few seconds once.
_CALIBRATION = replace(
    decision_request(EMPTY_VIEW.render(), TaskSpec("loan", "Decide the application.", ("APPROVE", "DENY"))),
    max_tokens=16,
)
_FREE = Price(0.0, 0.0)
# Words a server uses when it refuses a parameter it does not support.
_VIEW_SHAPE = (
    "Answer only with a JSON object: facts (each its text, exact figures kept, and the numbers of the events "
    "it cites), reasoning (lines), compliance_notes (lines)."
)
_DECISION_SHAPE = "Answer only with a JSON object: decision (one label of the label space), rationale, notice."
_UNSUPPORTED = ("response_format", "json_schema", "seed", "unsupported", "not supported", "unknown")
# The SDK's status errors by class, first match wins; a status without a class of its own goes by its code.
_STATUS_CAUSES: tuple[tuple[type[openai.APIStatusError], Cause], ...] = (
    (openai.AuthenticationError, Cause.UNAUTHORIZED),
    (openai.PermissionDeniedError, Cause.FORBIDDEN),
    (openai.NotFoundError, Cause.NOT_FOUND),
    (openai.RateLimitError, Cause.RATE_LIMITED),
    (openai.InternalServerError, Cause.SERVER_ERROR),
)


def _answer_schema(request: ModelRequest) -> dict[str, Any] | None:
    """The JSON schema the answer to this request must follow, when the prompt is one of ours."""
    if request.purpose in (Purpose.PROJECT, Purpose.SUMMARIZE):
        return VIEW_SCHEMA
    if request.purpose is Purpose.DECIDE:
        try:
            return decision_schema(read_decision_prompt(request.prompt).task.label_space)
        except PromptFormatError:
            return None
    return None


class OpenAIBackend:
    """Calls an OpenAI-compatible Chat Completions endpoint; records what the server says it is."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        prices: dict[str, Price] | None = None,
        seed: int | None = DEFAULT_SEED,
        structured: bool = True,
    ) -> None:
        self._model = model
        self._base_url = base_url
        self._window: int | None = None
        self._window_asked = False
        self._counter: TokenCounter | None = None
        self._counter_asked = False
        self._tags: dict[str, dict[str, str]] = {}
        self._prices = prices or {}
        self._seed = seed
        self._structured = structured
        self._cache_keys = True  # until the server refuses `prompt_cache_key`
        self._pacing = Pacing(base_url.rstrip("/").removesuffix("/v1"), timeout_s)
        self._max_retries = max_retries
        # Local servers need no key; the SDK insists on one, so a placeholder goes in the header.
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=max_retries
        )
        self._endpoint = Endpoint("Chat Completions", base_url, model, "DPM_OPENAI_BASE_URL", "DPM_OPENAI_API_KEY",
                                  timeout_s, max_retries + 1)  # fmt: skip

    @property
    def name(self) -> str:
        return "openai"

    @property
    def model(self) -> str:
        return self._model

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [{"role": "system", "content": request.system}, {"role": "user", "content": request.prompt}],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if self._seed is not None:
            body["seed"] = self._seed
        key = _cache_key(request) if self._cache_keys else None
        if key is not None:
            body["prompt_cache_key"] = key
        schema = _answer_schema(request) if self._structured else None
        if schema is not None:
            shape = _DECISION_SHAPE if request.purpose is Purpose.DECIDE else _VIEW_SHAPE
            body["messages"][0]["content"] = f"{request.system}\n\n{shape}"
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": f"dpm_{request.purpose.value}", "schema": schema, "strict": True},
            }
        return body

    def _served_tags(self, served: str) -> dict[str, str]:
        """The `key:value` tags /v1/models lists for the served model, asked once per model.

        llama.cpp lists what `dpm model up` tagged: the file's SHA-256, threads, server build.
        A server that lists none (or no models endpoint) gives none.
        """
        if served not in self._tags:
            try:
                listed = {m.id: (m.model_extra or {}).get("tags") for m in self._client.models.list()}
            except (openai.APIError, pydantic.ValidationError, ValueError):
                listed = {}
            raw = listed.get(served) or []
            self._tags[served] = dict(t.split(":", 1) for t in raw if isinstance(t, str) and ":" in t)
        return self._tags[served]

    def context_tokens(self) -> int | None:
        """The served model's window: as the server reports it, else as the price table lists it (asked once)."""
        if not self._window_asked:
            price = self._prices.get(self._model)
            self._window = self._reported_window() or (price.context_tokens if price else None)
            self._window_asked = True
        return self._window

    def fingerprint(self) -> str | None:
        """The served model file's SHA-256, where the server tags it (`dpm model up` does)."""
        digest = self._served_tags(self._model).get("sha256")
        return f"sha256:{digest}" if digest else None

    def token_counter(self) -> TokenCounter | None:
        """The server's own tokenizer, when it has one to ask (llama.cpp); asked once."""
        if not self._counter_asked:
            root = self._base_url.rstrip("/").removesuffix("/v1")
            self._counter = llama_tokenizer(root, self._model, self._served_tags(self._model).get("sha256"))
            self._counter_asked = True
        return self._counter

    def _reported_window(self) -> int | None:
        """The `n_ctx` a `dpm model up` server tags its model with, else the one llama.cpp's /props gives."""
        tagged = self._served_tags(self._model).get("n_ctx", "")
        if tagged.isdigit():
            return int(tagged)
        root = self._base_url.rstrip("/").removesuffix("/v1")
        try:
            with urllib.request.urlopen(f"{root}/props", timeout=5) as answer:  # noqa: S310 - the configured server
                props = orjson.loads(answer.read())
            n_ctx = props["default_generation_settings"]["n_ctx"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            return None  # not llama.cpp, or it does not say
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None

    def _prompt_tokens(self, request: ModelRequest) -> int:
        counter = self.token_counter()
        texts = [request.system, request.prompt]
        return sum(counter.count(texts)) if counter is not None else sum(map(estimated_tokens, texts))

    def _calibrate(self) -> None:
        """Measures a one-slot server's speeds with one short call, before a long one is given a timeout."""
        try:
            answer = self._client.chat.completions.with_raw_response.create(**self._body(_CALIBRATION))
        except (openai.APIError, pydantic.ValidationError, ValueError) as exc:
            _LOG.warning("the server's speed could not be measured: %s", self._failure(exc))
            return
        self._pacing.speeds.observe(answer.http_response.content)

    def _send(self, request: ModelRequest) -> tuple[bytes, Any]:
        """The call, retried by the SDK; to a one-slot server, retried here, never behind a call it gave up on.

        Such a server goes on working on a request whose client timed out, so a retry sent at once
        would queue behind it and time out in turn: after a timeout the retry waits until the
        server's slots are idle.
        """
        if not self._pacing.serves_one_at_a_time():
            return self._create(request, self._client)
        pacing = self._pacing
        if pacing.speeds.expected_s(1, 1) is None:
            self._calibrate()
        prompt_tokens = self._prompt_tokens(request)
        timeout = pacing.timeout_for(prompt_tokens, request.max_tokens)
        for attempt in range(self._max_retries + 1):
            try:
                return self._create(request, self._client.with_options(timeout=timeout, max_retries=0))
            except openai.APITimeoutError:
                waited = pacing.wait_out_abandoned(_IDLE_WAIT_S)
                expected = pacing.expected_s(prompt_tokens, request.max_tokens)
                if expected is not None:  # speeds measured on short calls understate a long prompt's time
                    pacing.learn(expected, timeout + waited)
                if attempt == self._max_retries:
                    raise
                timeout = retry_timeout(timeout, waited)
            except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError):
                if attempt == self._max_retries:
                    raise
                time.sleep(min(_MAX_BACKOFF_S, 0.5 * 2**attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _create(self, request: ModelRequest, client: openai.OpenAI) -> tuple[bytes, Any]:
        try:
            raw_response = client.chat.completions.with_raw_response.create(**self._body(request))
        except openai.BadRequestError as exc:
            refused = str(exc.message).lower()
            if self._cache_keys and "prompt_cache_key" in refused:
                self._cache_keys = False  # a server without the parameter: it caches by prefix alone, if at all
                return self._create(request, client)
            if (self._structured or self._seed is not None) and any(w in refused for w in _UNSUPPORTED):
                self._structured, self._seed = False, None  # this server takes plain prompting only
                return self._create(request, client)
            raise
        self._pacing.speeds.observe(raw_response.http_response.content)
        return raw_response.http_response.content, raw_response.parse()

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        try:
            raw, completion = self._send(request)
            text = response_text(raw, ResponseFormat.OPENAI_CHAT) if completion.choices else None
        except (openai.APIError, pydantic.ValidationError, ValueError, ModelBackendError) as exc:
            raise self._failure(exc) from exc
        if text is None:
            raise self._endpoint.error(Cause.MALFORMED)
        usage = _usage(completion)
        served = str(completion.model or self._model)
        price = self._prices.get(served, self._prices.get(self._model))
        serving = {"structured_output": "json_schema" if self._structured else "none",
                   "price": "listed" if price else "unlisted: cost counted as 0"}  # fmt: skip
        if completion.system_fingerprint:
            serving["system_fingerprint"] = str(completion.system_fingerprint)
        serving.update(self._served_tags(served))
        return ModelResponse(
            text=text,
            raw=raw,
            model=served,
            usage=usage,
            cost_usd=(price or _FREE).cost(usage),
            latency_s=time.perf_counter() - started,
            stop_reason=str(completion.choices[0].finish_reason),
            format=ResponseFormat.OPENAI_CHAT,
            serving=tuple(sorted(serving.items())),
        )

    def _failure(self, exc: Exception) -> ModelBackendError:
        """The SDK's exception as one line naming its cause, the endpoint and the fix.

        Anything else raised while reading the answer is a malformed body.
        """
        if isinstance(exc, openai.APITimeoutError):
            return self._endpoint.error(Cause.TIMEOUT)
        if isinstance(exc, openai.APIConnectionError):
            return self._endpoint.error(connection_cause(exc))
        if isinstance(exc, openai.APIStatusError):
            cause = next((c for kind, c in _STATUS_CAUSES if isinstance(exc, kind)), status_cause(exc.status_code))
            return self._endpoint.error(cause, status=exc.status_code, code=exc.code or exc.type)
        return self._endpoint.error(Cause.MALFORMED)


def _cache_key(request: ModelRequest) -> str | None:
    """A key the calls sharing a case's log share (OpenAI routes them to one cache by it); None for other prompts.

    A digest of the system prompt and the log's first stretch: it names no case and tells nothing
    of its content, and a longer log of the case begins with the same stretch.
    """
    if prompt_layout(request.prompt) is PromptLayout.TASK_FIRST:
        return None
    return "dpm-" + sha256_hex(f"{request.system}\x00{request.prompt[:CACHE_BLOCK_CHARS]}".encode())[:32]


def _usage(completion: ChatCompletion) -> Usage:
    """Tokens as Chat Completions reports them: `prompt_tokens` counts the cached ones too."""
    reported = completion.usage
    if reported is None:
        return Usage(0, 0)
    details = reported.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(reported.prompt_tokens, reported.completion_tokens, 0, cached)


def from_settings(settings: ModelSettings, recorded: Sequence[ModelCall]) -> OpenAIBackend:
    """The backend DPM_OPENAI_BASE_URL, DPM_OPENAI_API_KEY and DPM_MODEL name."""
    del recorded
    if not settings.openai_base_url:
        raise ModelBackendError(
            f"the openai backend needs DPM_OPENAI_BASE_URL (e.g. http://127.0.0.1:8080/v1, dpm model up); {OFFLINE}"
        )
    if not settings.model:
        raise ModelBackendError("the openai backend needs DPM_MODEL: the model id the server serves")
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return OpenAIBackend(
        settings.openai_base_url,
        settings.model,
        api_key=key,
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
        prices=load_price_table(settings.price_table),
        seed=settings.openai_seed,
    )
