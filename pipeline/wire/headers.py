"""Record headers the pipeline writes beside the value: standard ones any consumer can route by, and its own.

Every record carries the CloudEvents Kafka protocol binding's attributes in binary content mode
(`ce_specversion`, `ce_type`, `ce_source`, `ce_id`, `ce_time`, and `content-type` where there is
data), the schema id of its value and the tenant, so a consumer that is not ours can route and
filter without parsing (or being able to open) the value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

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
