"""The standard headers: CloudEvents attributes (Kafka binding, binary mode), schema id and tenant."""

from __future__ import annotations

import datetime as dt

from pipeline.wire.headers import MAX_TRACESTATE_BYTES, standard_headers, trace_context
from pipeline.wire.schema_ids import SchemaId


def test_a_record_carries_the_cloudevents_attributes_its_schema_and_its_tenant() -> None:
    at = dt.datetime(2026, 11, 30, 17, 1, 2, 345678, tzinfo=dt.UTC)
    headers = dict(standard_headers(SchemaId.DECISION, source="/dpm/projection/w-1", event_id="t-1:dpm/decision",
                                    tenant="acme", at=at))  # fmt: skip
    assert headers == {
        "content-type": b"application/json",
        "ce_specversion": b"1.0",
        "ce_type": b"dpm.decision.v2",
        "ce_source": b"/dpm/projection/w-1",
        "ce_id": b"t-1:dpm/decision",
        "ce_time": b"2026-11-30T17:01:02.345Z",
        "dpm-schema": b"dpm.decision.v2",
        "dpm-tenant": b"acme",
    }


def test_a_tombstone_has_no_content_type_and_says_so_in_its_type() -> None:
    headers = dict(standard_headers(SchemaId.KEY, source="/dpm/keys", event_id="acme/c-1", tenant="acme",
                                    tombstone=True))  # fmt: skip
    assert "content-type" not in headers
    assert headers["ce_type"] == b"dpm.key.v1.tombstone"
    assert headers["ce_time"].endswith(b"Z")


PARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_valid_trace_context_passes_on_and_nothing_else_does() -> None:
    state = b"rojo=00f067aa0ba902b7, congo=t61rcWkgMzE, acme@vendor=x"
    assert trace_context([("traceparent", PARENT), ("tracestate", state), ("other", b"x")]) == (
        ("traceparent", PARENT),
        ("tracestate", state),
    )
    assert trace_context([("traceparent", b"01-" + PARENT[3:] + b"-future-field")])  # a later version's extra fields
    for bad in (
        b"x" * 900_000,  # a 900 KB header would be copied onto every output
        b"ff" + PARENT[2:],  # version ff
        PARENT.replace(b"4bf92f3577b34da6a3ce929d0e0e4736", b"0" * 32),  # all-zero trace id
        PARENT.replace(b"00f067aa0ba902b7", b"0" * 16),  # all-zero parent id
        PARENT.upper(),
        PARENT + b"-extra",  # version 00 has exactly four fields
    ):
        assert trace_context([("traceparent", bad)]) == ()
    assert trace_context([("traceparent", PARENT), ("traceparent", PARENT)]) == ()  # two parents: which?
    too_long = b",".join(b"k%d=v" % n for n in range(120))
    assert len(too_long) > MAX_TRACESTATE_BYTES
    for bad_state in (too_long, b"UPPER=x", b"k=v=w", b"k=" + b"v" * 300):
        assert trace_context([("traceparent", PARENT), ("tracestate", bad_state)]) == (("traceparent", PARENT),)
    assert trace_context([("tracestate", b"k=v")]) == ()  # no state without a parent
