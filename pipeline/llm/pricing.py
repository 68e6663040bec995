"""Model prices per million tokens; configurable, because a bank's negotiated rates are its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from pipeline.core.model import ModelBackendError, Usage

_PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, and the model's context window (None: not listed).

    Input tokens written to the provider's prompt cache and read from it have prices of their own
    (None: the input price, for a provider that charges no premium or gives no discount).
    """

    input_per_mtok: float
    output_per_mtok: float
    context_tokens: int | None = None
    cache_write_per_mtok: float | None = None
    cache_read_per_mtok: float | None = None

    def cost(self, usage: Usage) -> float:
        uncached = usage.input_tokens - usage.cache_write_tokens - usage.cache_read_tokens
        write = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        dollars = (uncached * self.input_per_mtok + usage.cache_write_tokens * write + usage.cache_read_tokens * read
                   + usage.output_tokens * self.output_per_mtok)  # fmt: skip
        return dollars / _PER_MILLION


# List prices at the time of writing; override with DPM_PRICE_TABLE for negotiated rates or new models.
# Anthropic's prompt cache: a write (five-minute cache) costs 1.25x the input price, a read 0.1x.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-haiku-4-5-20251001": Price(1.0, 5.0, 200_000, cache_write_per_mtok=1.25, cache_read_per_mtok=0.1),
    "claude-haiku-4-5": Price(1.0, 5.0, 200_000, cache_write_per_mtok=1.25, cache_read_per_mtok=0.1),
    "claude-sonnet-4-5-20250929": Price(3.0, 15.0, 200_000, cache_write_per_mtok=3.75, cache_read_per_mtok=0.3),
    "claude-sonnet-4-5": Price(3.0, 15.0, 200_000, cache_write_per_mtok=3.75, cache_read_per_mtok=0.3),
}


def load_price_table(path: Path | None) -> dict[str, Price]:
    """The default prices, overridden by a JSON file `{"model": {"input_per_mtok": x, "output_per_mtok": y}}`.

    An entry may also give the model's window, `"context_tokens": n`, and its prompt cache's prices,
    `"cache_write_per_mtok"` and `"cache_read_per_mtok"` (absent: the input price).
    """
    table = dict(DEFAULT_PRICES)
    if path is None:
        return table
    try:
        raw = orjson.loads(path.read_bytes())
        for model, p in raw.items():
            table[model] = Price(
                float(p["input_per_mtok"]),
                float(p["output_per_mtok"]),
                _tokens(p.get("context_tokens")),
                _dollars(p.get("cache_write_per_mtok")),
                _dollars(p.get("cache_read_per_mtok")),
            )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelBackendError(f"price table {path} is unreadable: {exc}") from exc
    return table


def _tokens(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"context_tokens must be a positive integer, got {value!r}")
    return value


def _dollars(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"a price must be a number of dollars, 0 or more, got {value!r}")
    return float(value)
