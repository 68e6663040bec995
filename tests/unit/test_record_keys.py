"""A record's key against its value: every kind of disagreement is refused; what a record names, by key or value."""

from __future__ import annotations

import pytest

from pipeline.core.events import CaseRef, Event
from pipeline.wire.event import EventRecord
from pipeline.wire.record_keys import check_case_key, check_event_key, check_partition, names_case, names_tenant
from pipeline.wire.rejection import RejectedError, Rejection

Y = CaseRef("bank", "case-y")
EVENT = Event(Y, 7, "doc", "text")


@pytest.mark.parametrize(
    "key",
    [b"bank/case-x/00000007", b"acme/case-y/00000007", b"bank/case-y/00000008", b"bank/case-y/7", None, b""],
    ids=["case", "tenant", "seq", "unpadded", "none", "empty"],
)
def test_an_event_filed_under_another_key_is_refused(key: bytes | None) -> None:
    with pytest.raises(RejectedError) as refused:
        check_event_key(key, EVENT)
    assert refused.value.reason is Rejection.KEY_MISMATCH


def test_an_event_under_its_own_key_and_partition_passes() -> None:
    check_event_key(b"bank/case-y/00000007", EVENT)
    check_case_key(b"bank/case-y", Y, "trigger")
    check_partition(2, Y, 2)
    with pytest.raises(RejectedError, match="belongs in partition 1"):
        check_partition(2, Y, 1)
    with pytest.raises(RejectedError, match="the trigger is for bank/case-y"):
        check_case_key(b"bank/case-x", Y, "trigger")


def test_a_record_names_a_case_by_its_key_or_by_its_value() -> None:
    value = EventRecord(EVENT).encode()
    assert names_case(b"bank/case-y/00000001", b"anything", Y)
    assert names_case(b"bank/case-x/00000777", value, Y)  # filed under X, says Y
    assert not names_case(b"bank/case-x/00000777", value.replace(b"case-y", b"case-z"), Y)
    assert not names_case(b"bank/case-yy/00000001", b"{}", Y)  # a longer case id is another case
    assert not names_case(b"bank/case-x/00000001", b"not json case-y", Y)
    assert names_tenant(b"other/c/00000001", value, "bank")
    assert not names_tenant(b"bankers/c/00000001", b"{}", "bank")
