"""The auditor's live index without a broker: an erasure read on the key topic drops a case's content, sealed or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.run import run_dpm
from pipeline.core.task import Budget
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services import audit_index
from pipeline.services.audit_index import DecisionIndex, ErasedDecision, IndexedDecision, LiveIndex
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.run_records import run_records
from pipeline.wire.trigger import DecisionId
from tests.cases import load_fixture

CASE = load_fixture()
NAMES = TopicNames("idx")


class _Follower:
    """A topic's records, each handed out once (what TopicFollower.new_records does)."""

    topics: ClassVar[dict[str, list[bytes]]] = {}

    def __init__(self, _config: dict[str, str], topic: str) -> None:
        self.topic = topic
        self._next = 0

    def new_records(self) -> Iterator[RawRecord]:
        values = self.topics.get(self.topic, [])
        for offset in range(self._next, len(values)):
            yield RawRecord(LogPosition(0, offset), b"k", values[offset], timestamp_ms=1)
        self._next = len(values)

    def close(self) -> None:
        pass


@pytest.fixture
def unsealed(monkeypatch: pytest.MonkeyPatch) -> DecisionId:
    """One decision published in clear (DPM_ENCRYPTION=off): no data key to destroy, only an erasure to read."""
    monkeypatch.setattr(audit_index, "TopicFollower", _Follower)
    result = run_dpm(CASE.trajectory, CASE.task, Budget(900), ExtractiveBackend())
    decision_id = DecisionId("t-1", result.architecture)
    positions = tuple(LogPosition(0, i) for i in range(len(CASE.trajectory.events)))
    provenance = Provenance(decision_id, positions, PositionsSource.TRIGGER, "extractive", "w-1")
    records = run_records(result, CASE.trajectory, task=CASE.task, budget=Budget(900), provenance=provenance)
    _Follower.topics = {NAMES.decisions: [records.decision.encode()], NAMES.views: [records.view.encode()]}
    return decision_id


def test_an_erasure_on_the_key_topic_drops_an_unsealed_case_s_content_at_the_next_refresh(
    unsealed: DecisionId, tmp_path: Path
) -> None:
    topic = MemoryKeyTopic()
    keys = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), topic)
    index = DecisionIndex(capacity=10)
    live = LiveIndex({}, NAMES, keys, index)
    live.refresh()
    item = index.get(CASE.ref.tenant, unsealed)
    assert isinstance(item, IndexedDecision)
    assert live.erased([item]) == set()
    erasing = CaseKeys(KeyRing(LocalFileKeyProvider(tmp_path)), topic)  # `dpm erase`, in another process
    erasing.erase_case(CASE.ref)  # a tombstone and the erased marker on the key topic
    assert live.erased([item]) == {CASE.ref}  # what a page asks before it shows content: erased now
    live.refresh()
    assert isinstance(index.get(CASE.ref.tenant, unsealed), ErasedDecision)
