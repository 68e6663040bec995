"""Record headers the pipeline writes beside the value: standard ones any consumer can route by, and its own.

Every record carries the CloudEvents Kafka protocol binding's attributes in binary content mode
(`ce_specversion`, `ce_type`, `ce_source`, `ce_id`, `ce_time`, and `content-type` where there is
data), the schema id of its value and the tenant, so a consumer that is not ours can route and
filter without parsing (or being able to open) the value.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence

from pipeline.wire.schema_ids import SchemaId

TENANT_HEADER = "dpm-tenant"
REASON_HEADER = "dpm-reason"
SCHEMA_HEADER = "dpm-schema"
CONTENT_TYPE = "content-type"
JSON = "application/json"
SPEC_VERSION = "1.0"
TOMBSTONE = ".tombstone"  # appended to ce_type on a record without a value (an erasure)

Headers = tuple[tuple[str, bytes], ...]


def header_pairs(found: Mapping[str, object] | Iterable[tuple[str, object]] | None) -> Headers:
    """A consumed record's headers as (name, bytes) pairs, whatever shape the client gave them in.

    Clients hand headers over as a list of pairs or a mapping; a header without a value is dropped.
    """
    pairs = found.items() if isinstance(found, Mapping) else (found or ())
    return tuple((str(name), value) for name, value in pairs if isinstance(value, bytes))


def standard_headers(
    schema: SchemaId,
    *,
    source: str,
    event_id: str,
    tenant: str | None,
    tombstone: bool = False,
    at: dt.datetime | None = None,
) -> Headers:
    """The CloudEvents attributes of one record, its schema id and its tenant.

    `source` and `event_id` together are unique per record (CloudEvents' rule): the source names
    the writer (`/dpm/projection/<worker id>`), the id the record within it (`<decision id>/view`).
    A tombstone has no data, hence no content type, and its type ends in `.tombstone`.
    """
    moment = (at or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    headers: list[tuple[str, str]] = [
        ("ce_specversion", SPEC_VERSION),
        ("ce_type", schema.value + (TOMBSTONE if tombstone else "")),
        ("ce_source", source),
        ("ce_id", event_id),
        ("ce_time", moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")),
        (SCHEMA_HEADER, schema.value),
    ]
    if not tombstone:
        headers.insert(0, (CONTENT_TYPE, JSON))
    if tenant is not None:
        headers.append((TENANT_HEADER, tenant))
    return tuple((name, value.encode("utf-8")) for name, value in headers)


# W3C Trace Context: the only headers copied from an input record to what is made for it.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_HEADERS = (TRACEPARENT, TRACESTATE)
# version-traceid-parentid-flags; version ff, an all-zero trace id or parent id are invalid. A later
# version may append fields after a dash (the spec's forward compatibility), within a sane length.
_TRACEPARENT = re.compile(rb"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-[ -~]{0,200})?")
# One tracestate list member: key (optionally tenant@system) = value of printable ASCII but `,` and `=`.
_TRACESTATE_MEMBER = re.compile(
    rb"[a-z0-9][_0-9a-z*/-]{0,255}(@[a-z][_0-9a-z*/-]{0,13})?=[ -+\--<>-~]{0,255}[!-+\--<>-~]"
)
MAX_TRACESTATE_BYTES = 512  # what the spec asks every vendor to pass on; longer is dropped, not cut
_MAX_TRACESTATE_MEMBERS = 32


def _valid_traceparent(value: bytes) -> bool:
    return _TRACEPARENT.fullmatch(value) is not None and (value[:2] != b"00" or len(value) == 55)


def _valid_tracestate(value: bytes) -> bool:
    members = [m.strip(b" \t") for m in value.split(b",") if m.strip(b" \t")]
    return (len(value) <= MAX_TRACESTATE_BYTES and len(members) <= _MAX_TRACESTATE_MEMBERS
            and all(_TRACESTATE_MEMBER.fullmatch(m) for m in members))  # fmt: skip


def trace_context(headers: Sequence[tuple[str, bytes]]) -> Headers:
    """The W3C trace context among `headers` worth passing on: one valid traceparent, and with it one valid tracestate.

    Anything else is dropped, never copied: a header is copied to every record made for the input,
    so an oversized or malformed one (a 900 KB "traceparent") would otherwise be written several
    times over and could make those records too large to publish.
    """
    parents = [value for name, value in headers if name == TRACEPARENT]
    if len(parents) != 1 or not _valid_traceparent(parents[0]):
        return ()
    states = [value for name, value in headers if name == TRACESTATE]
    if len(states) == 1 and _valid_tracestate(states[0]):
        return ((TRACEPARENT, parents[0]), (TRACESTATE, states[0]))
    return ((TRACEPARENT, parents[0]),)
