"""What a decision page shows, computed from the records: cited events marked up (fact rows: core/explanation.py).

Pure functions over the core's types, so the page's claims (which citation is valid, which fact is
grounded, which number is highlighted) are the same checks the worker recorded, tested without HTTP.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pipeline.core.anchors import extract_anchors, verbatim_spans
from pipeline.core.events import Trajectory
from pipeline.core.view import MemoryView


@dataclass(frozen=True)
class Segment:
    text: str
    marked: bool


@dataclass(frozen=True)
class CitedEvent:
    """An event a fact cites: its text cut into segments, the citing facts' figures marked."""

    index: int  # as the prompt numbered it, 1-based
    seq: int
    kind: str
    segments: tuple[Segment, ...]
    cited_by: tuple[int, ...]  # fact numbers


def cited_events(view: MemoryView, trajectory: Trajectory) -> list[CitedEvent]:
    """The events the view cites, in order, each with the figures of the facts citing it highlighted."""
    citing: dict[int, list[int]] = {}
    for number, fact in enumerate(view.facts, start=1):
        for index in fact.citations:
            if trajectory.has_index(index):
                citing.setdefault(index, []).append(number)
    events = []
    for index in sorted(citing):
        event = trajectory.by_index(index)
        figures = [a.text for n in citing[index] for a in extract_anchors(view.facts[n - 1].text)]
        events.append(CitedEvent(index, event.seq, event.kind, marked(event.text, figures), tuple(citing[index])))
    return events


def marked(text: str, figures: list[str]) -> tuple[Segment, ...]:
    """`text` as segments, each occurrence of a figure (as a whole number, not inside another) marked."""
    segments: list[Segment] = []
    at = 0
    for start, end in verbatim_spans(text, figures):
        if start > at:
            segments.append(Segment(text[at:start], marked=False))
        segments.append(Segment(text[start:end], marked=True))
        at = end
    if at < len(text):
        segments.append(Segment(text[at:], marked=False))
    return tuple(segments)


def when(ms: int) -> str:
    """A record timestamp as UTC time to the second."""
    if ms <= 0:
        return "unknown"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def parse_when(text: str | None) -> int | None:
    """Milliseconds since the epoch from `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM` (UTC); None when empty."""
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD) or a time (YYYY-MM-DDTHH:MM)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)
