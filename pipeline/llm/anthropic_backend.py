"""AnthropicBackend: the Messages API through the official SDK, at temperature 0, with retries and cost."""

from __future__ import annotations

import time
from collections.abc import Sequence

import anthropic
import pydantic
from anthropic.types import CacheControlEphemeralParam, TextBlockParam, UserMessageParam

from pipeline.config.settings import ModelSettings
from pipeline.core.model import ModelBackendError, ModelRequest, ModelResponse, ResponseFormat, Usage, response_text
from pipeline.core.prompt import cache_blocks
from pipeline.core.run import ModelCall
from pipeline.llm.failures import OFFLINE, Cause, Endpoint, connection_cause, status_cause
from pipeline.llm.pricing import DEFAULT_PRICES, Price, load_price_table

DEFAULT_MODEL = "claude-haiku-4-5-20251001"
# The SDK's status errors by class, first match wins; a status without a class of its own goes by its code.
_STATUS_CAUSES: tuple[tuple[type[anthropic.APIStatusError], Cause], ...] = (
    (anthropic.AuthenticationError, Cause.UNAUTHORIZED),
    (anthropic.PermissionDeniedError, Cause.FORBIDDEN),
    (anthropic.NotFoundError, Cause.NOT_FOUND),
    (anthropic.RateLimitError, Cause.RATE_LIMITED),
    (anthropic.RequestTimeoutError, Cause.TIMEOUT),
    (anthropic.InternalServerError, Cause.SERVER_ERROR),
)


class AnthropicBackend:
    """Calls the Messages API through the official SDK.

    The SDK retries 408/409/429/5xx/529 and connection errors with exponential backoff,
    honouring retry-after(-ms), up to `max_retries` times; what still fails is wrapped.
    """

    def __init__(
        self,
        api_key: str,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        prices: dict[str, Price] | None = None,
    ) -> None:
        table = prices if prices is not None else DEFAULT_PRICES
        if model not in table:
            raise ModelBackendError(f"no price for model {model!r}: add it to the price table (DPM_PRICE_TABLE)")
        self._price = table[model]
        self._model = model
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
        )
        self._endpoint = Endpoint("Messages API", str(self._client.base_url), model, "ANTHROPIC_BASE_URL",
                                  "ANTHROPIC_API_KEY", timeout_s, max_retries + 1)  # fmt: skip

    @property
    def name(self) -> str:
        return "anthropic"

    @property
    def model(self) -> str:
        return self._model

    def context_tokens(self) -> int | None:
        """The model's window, as the price table lists it."""
        return self._price.context_tokens

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        try:
            raw_response = self._client.messages.with_raw_response.create(
                model=self._model,
                max_tokens=request.max_tokens,
                system=request.system,
                messages=[UserMessageParam(role="user", content=_content(request.prompt))],
                # SDK 2.x dropped sampling parameters from its typed signature; the API still takes
                # temperature for the Haiku 4.5 family, and the DPM protocol pins it at 0.
                extra_body={"temperature": request.temperature},
            )
            raw = raw_response.read()
            message = raw_response.parse()
            text = response_text(raw, ResponseFormat.ANTHROPIC_MESSAGES)
        except (anthropic.APIError, pydantic.ValidationError, ValueError, ModelBackendError) as exc:
            raise self._failure(exc) from exc
        usage = _usage(message.usage)
        return ModelResponse(
            text=text,
            raw=raw,
            model=message.model,
            usage=usage,
            cost_usd=self._price.cost(usage),
            latency_s=time.perf_counter() - started,
            stop_reason=str(message.stop_reason),
        )

    def _failure(self, exc: Exception) -> ModelBackendError:
        """The SDK's exception as one line naming its cause, the endpoint and the fix.

        Anything else raised while reading the answer is a malformed body.
        """
        if isinstance(exc, anthropic.APITimeoutError):
            return self._endpoint.error(Cause.TIMEOUT)
        if isinstance(exc, anthropic.APIConnectionError):
            return self._endpoint.error(connection_cause(exc))
        if isinstance(exc, anthropic.APIStatusError):
            cause = next((c for kind, c in _STATUS_CAUSES if isinstance(exc, kind)), status_cause(exc.status_code))
            return self._endpoint.error(cause, status=exc.status_code, code=exc.type)
        return self._endpoint.error(Cause.MALFORMED)


def _content(prompt: str) -> str | list[TextBlockParam]:
    """The user message: the prompt as one string, or as text blocks with cache breakpoints (prompt.cache_blocks).

    A block's text is the prompt's own: the model reads the same characters either way.
    """
    blocks = cache_blocks(prompt)
    if len(blocks) == 1:
        return prompt
    return [_block(b.text, cached=b.breakpoint) for b in blocks]


def _block(text: str, *, cached: bool) -> TextBlockParam:
    if cached:
        return TextBlockParam(type="text", text=text, cache_control=CacheControlEphemeralParam(type="ephemeral"))
    return TextBlockParam(type="text", text=text)


def _usage(reported: anthropic.types.Usage) -> Usage:
    """Every input token counted once: the API's `input_tokens` leaves out those written to and read from the cache."""
    written = reported.cache_creation_input_tokens or 0
    read = reported.cache_read_input_tokens or 0
    return Usage(reported.input_tokens + written + read, reported.output_tokens, written, read)


def from_settings(settings: ModelSettings, recorded: Sequence[ModelCall]) -> AnthropicBackend:
    """The backend DPM_MODEL and ANTHROPIC_* name; a clear error when the API key is missing."""
    del recorded
    if settings.anthropic_api_key is None:
        raise ModelBackendError(f"the anthropic backend needs ANTHROPIC_API_KEY; {OFFLINE}")
    return AnthropicBackend(
        settings.anthropic_api_key.get_secret_value(),
        settings.model or DEFAULT_MODEL,
        base_url=settings.anthropic_base_url,
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
        prices=load_price_table(settings.price_table),
    )
