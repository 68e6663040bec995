"""The model's context window, and how prompt sizes are measured against it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.core.errors import DpmError

# English prose runs about 4 characters per token in the hosted models' tokenizers. Small models'
# tokenizers cut figures finer (SmolLM2: 2 characters per token in staff notes), so a backend that
# can count with its own tokenizer does (TokenCounter); this estimate is for those that cannot.
CHARS_PER_TOKEN = 3
ESTIMATE = "estimate"  # how a window's tokens are counted when no tokenizer is asked


def estimated_tokens(text: str) -> int:
    """A token count of `text` at CHARS_PER_TOKEN characters per token."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class WindowTooSmallError(DpmError):
    """The window cannot hold even the smallest segment or merge the budget needs."""


class TokenCountError(DpmError):
    """Tokens cannot be counted the way a decision counted them (its tokenizer is not at hand)."""


class TokenCounter(Protocol):
    """Counts tokens as a model's tokenizer does; `name` is recorded with every decision cut by it."""

    @property
    def name(self) -> str: ...

    def count(self, texts: Sequence[str]) -> list[int]:
        """The tokens of each text, in order; raises TokenCountError when it cannot count."""
        ...


@dataclass(frozen=True)
class EstimatedTokens:
    """The estimate, for backends without a tokenizer to ask."""

    name: str = ESTIMATE

    def count(self, texts: Sequence[str]) -> list[int]:
        return [estimated_tokens(text) for text in texts]


@dataclass(frozen=True)
class MissingTokenizer:
    """The tokenizer a recorded decision was cut by, where it is not at hand: counting raises."""

    name: str

    def count(self, texts: Sequence[str]) -> list[int]:
        del texts
        raise TokenCountError(f"this decision was cut by counting with {self.name}, which is not at hand: replay it "
                              f"with that model's backend, or verify it with --verify-recorded")  # fmt: skip


ESTIMATED = EstimatedTokens()
# A prompt of more than this many characters per token of the limit is taken not to fit without being
# counted: no tokenizer averages that many characters per token over a case's text.
_SURELY_TOO_LONG_CHARS_PER_TOKEN = 8


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
    counter: TokenCounter = field(default=ESTIMATED, compare=False, repr=False)

    @property
    def counted_by(self) -> str:
        """How prompt sizes are counted: `estimate`, or the tokenizer's name."""
        return self.counter.name

    def count(self, *texts: str) -> int:
        """The tokens of `texts` together."""
        return sum(self.counter.count(list(texts)))

    def line_tokens(self, lines: Sequence[str]) -> list[int]:
        """The tokens each line takes in a prompt, its newline included."""
        return [tokens + 1 for tokens in self.counter.count(list(lines))]

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
        limit = self.prompt_limit(answer_tokens)
        if len(system) + len(prompt) > _SURELY_TOO_LONG_CHARS_PER_TOKEN * limit:
            return False  # not worth sending millions of characters to a tokenizer to learn it
        return self.count(system, prompt) <= limit

    def wire(self) -> dict[str, Any]:
        """As decision records and the baseline's stored steps carry it."""
        return {"tokens": self.tokens, "segment_tokens": self.segment_tokens, "margin_tokens": self.margin_tokens,
                "counted_by": self.counted_by}  # fmt: skip

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> Window:
        """The recorded window; counting with a tokenizer that is not at hand raises (see counted_with)."""
        name = str(value["counted_by"])
        counter: TokenCounter = ESTIMATED if name == ESTIMATE else MissingTokenizer(name)
        return cls(int(value["tokens"]), int(value["segment_tokens"]), int(value["margin_tokens"]), counter)

    def counted_with(self, counter: TokenCounter | None) -> Window:
        """This window counting with `counter` when it is the tokenizer it records (replay), else as it was."""
        if counter is None or counter.name != self.counted_by:
            return self
        return Window(self.tokens, self.segment_tokens, self.margin_tokens, counter)
