"""Segmented projection: a case too long for one call is projected in segments, then merged in a tree.

The cut: events are taken in order into a segment while its prompt stays within the window's
segment limit; the next event starts a new one. Where a cut falls depends only on the events
before it, so appending events never moves an earlier boundary, and every segment but the last
is the same on the next decision. An event larger than a segment is cut into parts of a fixed
size, each shown with the event's own index, so its facts cite the event, not a part.

The tree: each segment is projected (task-conditioned, citing the events' indices in the whole
log) into a view within the decision's budget; consecutive views are merged, as many at once as
one prompt holds, into one view within the same budget; and so on up, until one view is left: the
final view, which the decision is made over. Grouping is left to right, so a merge whose children
did not change is the same request as before.

Reuse: a view is content-addressed by the model and its request (which holds the task, budget,
prompt and the exact event text), and kept in a SegmentStore. A re-decision after new events then
computes the changed tail segment, the merges above it and the decision. A stored view is used
only if it is canonical, within the budget and cites only events of its own range; otherwise it
is computed again. The root is always computed, so every decision's final view comes from a
call recorded with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.core.hashing import json_digest, text_digest
from pipeline.core.model import ModelRequest, ModelResponse
from pipeline.core.parse import parse_view
from pipeline.core.prompt import (
    PartialView,
    PromptEvent,
    PromptLayout,
    event_line,
    merge_request,
    segment_request,
    view_line,
)
from pipeline.core.task import Budget, TaskSpec
from pipeline.core.view import MemoryView, fit_to_budget
from pipeline.core.window import CHARS_PER_TOKEN, Window, WindowTooSmallError

_FAR_INDEX = 10**12  # an event index longer than any real one, to size a prompt's fixed lines


class SegmentStore(Protocol):
    """Where segment views are kept between decisions, keyed by segment_key; may forget anything."""

    def get(self, key: str) -> str | None:
        """The view text stored under `key`, or None."""
        ...

    def put(self, key: str, view_text: str) -> None:
        """Stores a view computed under `key`."""
        ...


class DictSegmentStore:
    """A SegmentStore in a dict: one process's views (the workers keep theirs in a compacted topic)."""

    def __init__(self) -> None:
        self.views: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.views.get(key)

    def put(self, key: str, view_text: str) -> None:
        self.views[key] = view_text


def segment_key(model: str, request: ModelRequest) -> str:
    """A view's address: the model (with its fingerprint) and the exact request (task, budget, prompt, event bytes)."""
    return json_digest({"model": model, "request_sha256": request.digest})


@dataclass(frozen=True)
class SegmentNode:
    """One view of the tree, as a decision records it."""

    level: int  # 0: a segment of events; n: a merge of views of level n-1 (or below, carried up)
    first: int  # the first and last event index (1-based) it covers
    last: int
    request_sha256: str
    view_sha256: str
    reused: bool  # taken from the segment store rather than computed for this decision

    def wire(self) -> dict[str, object]:
        return {"level": self.level, "first": self.first, "last": self.last, "request_sha256": self.request_sha256,
                "view_sha256": self.view_sha256, "reused": self.reused}  # fmt: skip


@dataclass(frozen=True)
class SegmentedProjection:
    """The tree's nodes (leaves first, the root last) and the root's answer, which became the final view."""

    nodes: tuple[SegmentNode, ...]
    root_response: ModelResponse


def split_event(event: PromptEvent, room: int, window: Window) -> list[PromptEvent]:
    """The event whole if its line fits `room` tokens, else parts of a fixed size (halved where a part is denser)."""
    if window.line_tokens([event_line(event)])[0] <= room:
        return [event]
    size = max(1, (room * CHARS_PER_TOKEN) // 2)
    parts: list[PromptEvent] = []
    pending = [event.text[at : at + size] for at in range(0, len(event.text), size)]
    while pending:
        text = pending.pop(0)
        part = PromptEvent(event.index, event.kind, text)
        if window.line_tokens([event_line(part)])[0] <= room or len(text) == 1:
            parts.append(part)
        else:
            half = len(text) // 2
            pending[:0] = [text[:half], text[half:]]
    return parts


def cut_segments(
    events: Sequence[PromptEvent],
    task: TaskSpec,
    budget: Budget,
    window: Window,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> list[list[PromptEvent]]:
    """The events in segments whose projection prompts each fit the window's segment limit."""
    probe = segment_request([PromptEvent(_FAR_INDEX, "", "")], task, budget, whole=False, layout=layout)
    room = window.segment_limit(budget.response_token_limit) - window.count(probe.system, probe.prompt)
    if room < 64:
        raise WindowTooSmallError(
            f"a {window.tokens}-token window (segments of {window.segment_tokens}) leaves no room for events "
            f"beside a {budget.chars}-character budget"
        )
    segments: list[list[PromptEvent]] = []
    current: list[PromptEvent] = []
    used = 0
    sizes = window.line_tokens([event_line(event) for event in events])
    for event, size in zip(events, sizes, strict=True):
        for item, tokens in _items(event, size, room, window):
            if current and used + tokens > room:
                segments.append(current)
                current, used = [], 0
            current.append(item)
            used += tokens
    if current:
        segments.append(current)
    return segments


def _items(event: PromptEvent, tokens: int, room: int, window: Window) -> list[tuple[PromptEvent, int]]:
    """The event with its size, or its parts with theirs when it is larger than a segment."""
    if tokens <= room:
        return [(event, tokens)]
    parts = split_event(event, room, window)
    return list(zip(parts, window.line_tokens([event_line(part) for part in parts]), strict=True))


@dataclass
class _Tree:
    """Builds the views of one decision's tree, reusing stored ones where they can be trusted."""

    task: TaskSpec
    budget: Budget
    window: Window
    model: str
    call: Callable[[ModelRequest], ModelResponse]
    store: SegmentStore | None
    layout: PromptLayout
    nodes: list[SegmentNode] = field(default_factory=list)
    root_response: ModelResponse | None = None

    def view(self, request: ModelRequest, level: int, first: int, last: int, *, root: bool) -> PartialView:
        key = segment_key(self.model, request)
        stored = None if root or self.store is None else self.store.get(key)
        if stored is not None and self._trusted(stored, first, last):
            text, reused = stored, True
        else:
            response = self.call(request)
            view, _ = fit_to_budget(parse_view(response.text).view, self.budget.chars)
            text, reused = view.render(), False
            if root:
                self.root_response = response
            if self.store is not None:
                self.store.put(key, text)
        self.nodes.append(SegmentNode(level, first, last, request.digest, text_digest(text), reused))
        return PartialView(first, last, text)

    def _trusted(self, text: str, first: int, last: int) -> bool:
        """A stored view is used only as this tree would have made it: canonical, within budget, citing its range."""
        view: MemoryView = parse_view(text).view
        return (
            view.render() == text
            and len(text) <= self.budget.chars
            and all(first <= i <= last for i in view.cited_indices)
        )

    def merge_groups(self, views: list[PartialView]) -> list[list[PartialView]]:
        """Consecutive views grouped left to right, as many per merge prompt as the window holds."""
        limit = self.window.prompt_limit(self.budget.response_token_limit)
        probe = merge_request([PartialView(_FAR_INDEX, _FAR_INDEX, "")], self.task, self.budget, layout=self.layout)
        fixed = self.window.count(probe.system, probe.prompt)
        groups: list[list[PartialView]] = []
        current: list[PartialView] = []
        used = fixed
        for view, tokens in zip(views, self.window.line_tokens([view_line(v) for v in views]), strict=True):
            if current and used + tokens > limit:
                groups.append(current)
                current, used = [], fixed
            current.append(view)
            used += tokens
        groups.append(current)
        if any(len(group) < 2 for group in groups[:-1]) or (len(groups) == 1 and len(groups[0]) < 2):
            raise WindowTooSmallError(
                f"a {self.window.tokens}-token window cannot merge two views of a {self.budget.chars}-character budget"
            )
        return groups


def project_in_segments(
    events: Sequence[PromptEvent],
    task: TaskSpec,
    budget: Budget,
    window: Window,
    *,
    model: str,
    call: Callable[[ModelRequest], ModelResponse],
    store: SegmentStore | None = None,
    layout: PromptLayout = PromptLayout.TASK_FIRST,
) -> SegmentedProjection:
    """Projects `events` segment by segment and merges the views into one (see the module's docstring)."""
    tree = _Tree(task=task, budget=budget, window=window, model=model, call=call, store=store, layout=layout)
    segments = cut_segments(events, task, budget, window, layout)
    alone = len(segments) == 1
    views = [
        tree.view(segment_request(s, task, budget, whole=False, layout=layout), 0, s[0].index, s[-1].index, root=alone)
        for s in segments
    ]
    level = 0
    while len(views) > 1:
        level += 1
        groups = tree.merge_groups(views)
        merged: list[PartialView] = []
        for group in groups:
            if len(group) == 1:  # a last view with nothing left to merge with goes up as it is
                merged.append(group[0])
                continue
            request = merge_request(group, task, budget, layout=layout)
            merged.append(tree.view(request, level, group[0].first, group[-1].last, root=len(groups) == 1))
        views = merged
    if tree.root_response is None:  # pragma: no cover - the root is always computed
        raise AssertionError("the tree's root was not computed")
    return SegmentedProjection(tuple(tree.nodes), tree.root_response)
