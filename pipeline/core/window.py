"""The model's context window, and how prompt sizes are measured against it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.core.errors import DpmError

# English prose runs about 4 characters per token, numbers and identifiers fewer: 3 overestimates
# the tokens of the text this product sends, so a prompt estimated to fit does fit.
CHARS_PER_TOKEN = 3
ESTIMATE = "estimate"  # how a window's tokens are counted when no tokenizer is asked


def estimated_tokens(text: str) -> int:
    """A conservative token count of `text` (CHARS_PER_TOKEN characters per token)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class WindowTooSmallError(DpmError):
    """The window cannot hold even the smallest segment or merge the budget needs."""


@dataclass(frozen=True)
class Window:
    """A model's context window in tokens, and the most of it one segment's prompt may take.

    `segment_tokens` bounds segments well below a large window: a re-decision after new events
    re-reads only the log's last segment, so a segment as large as a 200,000-token window would
    make every re-decision read most of the case again. `margin_tokens` is kept free for what
    the count cannot see (chat templates, a tokenizer counting a little more than estimated).
    """

    tokens: int
    segment_tokens: int
    margin_tokens: int = 256
    counted_by: str = ESTIMATE

    def __post_init__(self) -> None:
        if self.tokens <= 0 or self.segment_tokens <= 0 or self.margin_tokens < 0:
            raise WindowTooSmallError(f"a window needs positive sizes, got {self}")

    def prompt_limit(self, answer_tokens: int) -> int:
        """The most tokens a prompt may take and still leave room for an answer of `answer_tokens`."""
        return self.tokens - answer_tokens - self.margin_tokens

    def segment_limit(self, answer_tokens: int) -> int:
        """The most tokens one segment's prompt may take."""
        return min(self.segment_tokens, self.prompt_limit(answer_tokens))

    def fits(self, system: str, prompt: str, answer_tokens: int) -> bool:
        return estimated_tokens(system) + estimated_tokens(prompt) <= self.prompt_limit(answer_tokens)

    def wire(self) -> dict[str, Any]:
        """As decision records and the baseline's stored steps carry it."""
        return {"tokens": self.tokens, "segment_tokens": self.segment_tokens, "margin_tokens": self.margin_tokens,
                "counted_by": self.counted_by}  # fmt: skip

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> Window:
        return cls(int(value["tokens"]), int(value["segment_tokens"]), int(value["margin_tokens"]),
                   str(value["counted_by"]))  # fmt: skip
