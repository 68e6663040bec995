"""Canonical hashing: stable across processes and hash seeds, sensitive to every byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.events import CaseRef, Event
from pipeline.core.hashing import canonical_json, events_digest, json_digest
from tests.processes import run_python

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), _json, max_size=8))
def test_key_order_does_not_change_the_digest(value: dict[str, object]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert json_digest(value) == json_digest(reordered)
    assert canonical_json(value) == canonical_json(reordered)


@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_event_text_changes_change_the_digest(a: str, b: str) -> None:
    ref = CaseRef("t", "c")
    same = events_digest([Event(ref, 1, "k", a)]) == events_digest([Event(ref, 1, "k", b)])
    assert same == (a == b)


_SCRIPT = """
from pipeline.core.events import CaseRef, Event
from pipeline.core.hashing import events_digest, json_digest
ref = CaseRef("acme", "case-1")
events = [Event(ref, i, "note", f"amount ${i},000 on 2026-01-0{i}") for i in range(1, 6)]
print(events_digest(events), json_digest({"b": 1, "a": [1, {"z": 2, "y": 3}], "é": "ü"}))
"""


def test_digests_agree_across_processes_with_different_hash_seeds() -> None:
    outputs = {run_python(_SCRIPT, seed) for seed in ("0", "1", "12345")}
    assert len(outputs) == 1
