"""The memory view: facts citing events, reasoning, compliance notes; its canonical text form.

Canonical text (what is hashed, measured against the budget and shown to the decision step):

    FACTS:
    - <fact text> [i][j]
    REASONING:
    <one or more lines; a line that would read as a section header is written as a bullet>
    COMPLIANCE NOTES:
    - <note>

Sections always appear, in this order; an empty section holds the single line `unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FACTS_HEADER = "FACTS:"
REASONING_HEADER = "REASONING:"
COMPLIANCE_HEADER = "COMPLIANCE NOTES:"
UNKNOWN = "unknown"

# A header is the section name alone on its line, or followed by a colon and optional content;
# models add markdown around it, so `## Reasoning` and `**FACTS:**` count too.
SECTION_HEADER = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*|__)?\s*(?P<name>facts|reasoning|compliance(?:\s+notes)?)\s*(?:\*\*|__)?\s*"
    r"(?::\s*(?:\*\*|__)?\s*(?P<rest>.*)|$)",
    re.IGNORECASE,
)


def _reasoning_line(line: str) -> str:
    """Reasoning lines are bare; one that reads as a header gets a bullet, which parsing strips."""
    return f"- {line}" if SECTION_HEADER.match(line) else line


def reasoning_line(line: str) -> str:
    """A reasoning line as the canonical text writes it."""
    return _reasoning_line(line).rstrip()


def compliance_line(note: str) -> str:
    """A compliance note as the canonical text writes it."""
    return f"- {note}".rstrip()


@dataclass(frozen=True)
class Fact:
    """A verifiable claim and the 1-based indices of the events it comes from."""

    text: str
    citations: tuple[int, ...] = ()

    def render(self) -> str:
        cites = "".join(f"[{i}]" for i in self.citations)
        return f"- {self.text} {cites}".rstrip()


@dataclass(frozen=True)
class MemoryView:
    """The three-section view M = pi(E, T, B)."""

    facts: tuple[Fact, ...]
    reasoning: tuple[str, ...]
    compliance: tuple[str, ...]

    def render(self) -> str:
        """The canonical text form (LF line ends, no trailing spaces, no final newline)."""
        lines = [FACTS_HEADER]
        lines += [f.render() for f in self.facts] or [UNKNOWN]
        lines.append(REASONING_HEADER)
        lines += [reasoning_line(line) for line in self.reasoning] or [UNKNOWN]
        lines.append(COMPLIANCE_HEADER)
        lines += [compliance_line(note) for note in self.compliance] or [UNKNOWN]
        return "\n".join(line.rstrip() for line in lines)

    @property
    def char_length(self) -> int:
        return len(self.render())

    @property
    def cited_indices(self) -> tuple[int, ...]:
        return tuple(i for f in self.facts for i in f.citations)


EMPTY_VIEW = MemoryView((), (), ())


def fit_to_budget(view: MemoryView, budget_chars: int) -> tuple[MemoryView, int]:
    """Shrinks `view` until its canonical text fits `budget_chars`; returns it and the characters cut.

    Repeatedly drops the last line of the section that is longest in characters (producers put
    the most relevant lines first). Deterministic, so enforcement never breaks replay; terminates
    because the empty view (about 50 characters) fits every valid budget. Linear in the lines: the
    sections' sizes and the rendered length are kept as lines are dropped, never recomputed (a weak
    model's runaway answer of thousands of facts once took 20 s to cut).
    """
    sections = _Sections(view)
    while sections.rendered_length > budget_chars and sections.drop_from_longest():
        pass
    fitted = sections.view()
    return fitted, view.char_length - fitted.char_length


class _Sections:
    """A view's three sections as lines that can be dropped from the end, with running lengths.

    `weights` are what "longest section" means (a fact's rendered line, a reasoning line or a note
    as written); `shown` are the lines' lengths in the canonical text, so that the rendered length
    is known exactly without rendering.
    """

    def __init__(self, view: MemoryView) -> None:
        self._facts, self._reasoning, self._compliance = list(view.facts), list(view.reasoning), list(view.compliance)
        self._weights = [[len(f.render()) for f in view.facts], [len(r) for r in view.reasoning],
                         [len(c) for c in view.compliance]]  # fmt: skip
        self._shown = [[len(f.render().rstrip()) for f in view.facts],
                       [len(reasoning_line(r).rstrip()) for r in view.reasoning],
                       [len(compliance_line(c).rstrip()) for c in view.compliance]]  # fmt: skip
        self._sizes = [sum(w) for w in self._weights]
        self._shown_sums = [sum(s) for s in self._shown]

    @property
    def rendered_length(self) -> int:
        """len(self.view().render()): the headers, each section's lines (or `unknown`), one newline between lines."""
        headers = len(FACTS_HEADER) + len(REASONING_HEADER) + len(COMPLIANCE_HEADER)
        bodies = sum(
            total if lines else len(UNKNOWN) for total, lines in zip(self._shown_sums, self._shown, strict=True)
        )
        lines = 3 + sum(max(1, len(s)) for s in self._shown)
        return headers + bodies + lines - 1

    def drop_from_longest(self) -> bool:
        """Drops the last line of the longest non-empty section (the first of equals); False when all are empty."""
        candidates = [i for i in range(3) if self._weights[i]]
        if not candidates:
            return False
        longest = max(candidates, key=lambda i: (self._sizes[i], -i))
        self._sizes[longest] -= self._weights[longest].pop()
        self._shown_sums[longest] -= self._shown[longest].pop()
        (self._facts, self._reasoning, self._compliance)[longest].pop()
        return True

    def view(self) -> MemoryView:
        return MemoryView(tuple(self._facts), tuple(self._reasoning), tuple(self._compliance))
