"""The erasure watch (kafka/keytopic/erasures.py) without a broker.

Tombstones and erased markers both say a case is erased.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.kafka.keytopic import erasures
from pipeline.kafka.keytopic.erasures import ErasureWatch
from pipeline.wire.key import KeyErased, KeyRecord

GONE, LIVE, BACK = CaseRef("acme", "gone"), CaseRef("acme", "live"), CaseRef("acme", "back")


def _key(case: CaseRef) -> bytes:
    return KeyRecord(case, "k1", "v1", b"\x01" * 60, 1).encode()


class _Topic:
    """A key topic as compaction leaves it: per case its latest record only."""

    records: ClassVar[list[tuple[bytes, bytes | None]]] = []

    def __init__(self, _config: dict[str, str], _topic: str) -> None:
        self._read = False

    def new_records(self) -> Iterator[RawRecord]:
        if not self._read:
            self._read = True
            for offset, (key, value) in enumerate(self.records):
                yield RawRecord(LogPosition(0, offset), key, value)

    def close(self) -> None:
        pass


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ErasureWatch, list[CaseRef]]]:
    monkeypatch.setattr(erasures, "TopicFollower", _Topic)
    dropped: list[CaseRef] = []
    watching = ErasureWatch({}, "dpm.keys", "acme", dropped.append, interval_s=0.05)
    yield watching, dropped
    watching.close()


def test_a_case_whose_tombstone_is_compacted_away_is_still_erased_by_its_marker(
    watch: tuple[ErasureWatch, list[CaseRef]],
) -> None:
    watching, dropped = watch
    _Topic.records = [
        (GONE.key.encode(), KeyErased(GONE, 1).encode()),  # the marker alone: key and tombstone compacted away
        (LIVE.key.encode(), _key(LIVE)),
        (b"other/gone", KeyErased(CaseRef("other", "gone"), 1).encode()),  # another tenant's
        (b"acme/bad", b"not a key record"),  # skipped (and logged), not taken for an erasure
        (BACK.key.encode(), None),  # the tombstone: still erased
    ]
    assert watching.erased(GONE, timeout_s=5)
    assert watching.erased(BACK, timeout_s=5)
    assert not watching.erased(LIVE, timeout_s=5)
    assert not watching.erased(CaseRef("acme", "bad"), timeout_s=5)
    assert not watching.erased(CaseRef("acme", "other"), timeout_s=5)
    assert dropped == [GONE, BACK]  # their caches dropped, once each


def test_a_marker_naming_another_case_than_its_key_is_not_an_erasure(
    watch: tuple[ErasureWatch, list[CaseRef]],
) -> None:
    watching, dropped = watch
    _Topic.records = [(LIVE.key.encode(), KeyErased(GONE, 1).encode())]
    assert not watching.erased(LIVE, timeout_s=5)
    assert not watching.erased(GONE, timeout_s=5)
    assert dropped == []
