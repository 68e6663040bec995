"""Model prices per million tokens; configurable, because a bank's negotiated rates are its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from pipeline.core.model import ModelBackendError, Usage

_PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """US dollars per million input and output tokens, and the model's context window (None: not listed)."""

    input_per_mtok: float
    output_per_mtok: float
    context_tokens: int | None = None

    def cost(self, usage: Usage) -> float:
        return (usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok) / _PER_MILLION


# List prices at the time of writing; override with DPM_PRICE_TABLE for negotiated rates or new models.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-haiku-4-5-20251001": Price(1.0, 5.0, 200_000),
    "claude-haiku-4-5": Price(1.0, 5.0, 200_000),
    "claude-sonnet-4-5-20250929": Price(3.0, 15.0, 200_000),
    "claude-sonnet-4-5": Price(3.0, 15.0, 200_000),
}


def load_price_table(path: Path | None) -> dict[str, Price]:
    """The default prices, overridden by a JSON file `{"model": {"input_per_mtok": x, "output_per_mtok": y}}`.

    An entry may also give the model's window, `"context_tokens": n`.
    """
    table = dict(DEFAULT_PRICES)
    if path is None:
        return table
    try:
        raw = orjson.loads(path.read_bytes())
        for model, p in raw.items():
            table[model] = Price(
                float(p["input_per_mtok"]), float(p["output_per_mtok"]), _tokens(p.get("context_tokens"))
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
