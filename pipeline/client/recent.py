"""The events a client appended lately, by where the broker put them: a decision citing them is typed without a read.

An agent usually asks for decisions of the cases it writes, and a decision cites a few of their
events. Their text is what this client sent, at positions the broker acknowledged in a committed
transaction, so reading them back from the log would return the same bytes: it would only cost
a seek per event (20 ms a decision under load). Events of cases written elsewhere, and those past
the bound, are read from the log as before; `explain` always reads the log (it checks it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from pipeline.core.events import CaseRef, Event, LogPosition

MAX_CHARS = 16_000_000  # text kept, about 16 MB (oldest forgotten first)


class RecentEvents:
    """Appended events by (events topic, position), the oldest forgotten past `max_chars` of text. Thread-safe."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._events: OrderedDict[tuple[str, LogPosition], Event] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def add(self, topic: str, appended: Iterable[tuple[LogPosition, Event]]) -> None:
        with self._lock:
            for position, event in appended:
                if len(event.text) > self._max_chars:
                    continue
                replaced = self._events.pop((topic, position), None)
                self._chars -= len(replaced.text) if replaced is not None else 0
                self._events[(topic, position)] = event
                self._chars += len(event.text)
            while self._chars > self._max_chars:
                self._chars -= len(self._events.popitem(last=False)[1].text)

    def forget_case(self, case: CaseRef) -> None:
        """Forgets the case's events (it was erased)."""
        with self._lock:
            for where in [w for w, event in self._events.items() if event.case == case]:
                self._chars -= len(self._events.pop(where).text)

    def get(self, topic: str, position: LogPosition) -> Event | None:
        with self._lock:
            return self._events.get((topic, position))
