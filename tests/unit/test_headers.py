"""The standard headers: CloudEvents attributes (Kafka binding, binary mode), schema id and tenant."""

from __future__ import annotations

import datetime as dt

from pipeline.wire.headers import standard_headers
from pipeline.wire.schema_ids import SchemaId


def test_a_record_carries_the_cloudevents_attributes_its_schema_and_its_tenant() -> None:
    at = dt.datetime(2026, 11, 30, 17, 1, 2, 345678, tzinfo=dt.UTC)
    headers = dict(standard_headers(SchemaId.DECISION, source="/dpm/projection/w-1", event_id="t-1:dpm/decision",
                                    tenant="acme", at=at))  # fmt: skip
    assert headers == {
        "content-type": b"application/json",
        "ce_specversion": b"1.0",
        "ce_type": b"dpm.decision.v1",
        "ce_source": b"/dpm/projection/w-1",
        "ce_id": b"t-1:dpm/decision",
        "ce_time": b"2026-11-30T17:01:02.345Z",
        "dpm-schema": b"dpm.decision.v1",
        "dpm-tenant": b"acme",
    }


def test_a_tombstone_has_no_content_type_and_says_so_in_its_type() -> None:
    headers = dict(standard_headers(SchemaId.KEY, source="/dpm/keys", event_id="acme/c-1", tenant="acme",
                                    tombstone=True))  # fmt: skip
    assert "content-type" not in headers
    assert headers["ce_type"] == b"dpm.key.v1.tombstone"
    assert headers["ce_time"].endswith(b"Z")
