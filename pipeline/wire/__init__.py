"""Every wire form: schema ids, JSON Schema validation, typed records with to_wire/from_wire, size limits.

Imports only the core. Each record type is a frozen object that encodes itself and decodes from
its wire value; nothing outside this package reads a record by string key.
"""

from pipeline.wire.audit import AuditRecord, calls_in_order
from pipeline.wire.case_files import (
    CaseFileError,
    case_from_dict,
    case_to_dict,
    load_cases,
    load_event_lines,
    write_case,
)
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance, ViewChecks
from pipeline.wire.event import CaseOpening, EventRecord, append_events, opened
from pipeline.wire.headers import REASON_HEADER, TENANT_HEADER, standard_headers
from pipeline.wire.limits import MAX_DEAD_LETTER_DETAIL_CHARS, MAX_TRAJECTORY_CHARS, MAX_TRIGGER_BYTES
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trajectory import assemble
from pipeline.wire.trigger import DecisionId, DecisionRequest, InvalidDecisionIdError
from pipeline.wire.validation import SchemaError, validate
from pipeline.wire.view import ViewRecord

__all__ = [
    "MAX_DEAD_LETTER_DETAIL_CHARS",
    "MAX_TRAJECTORY_CHARS",
    "MAX_TRIGGER_BYTES",
    "REASON_HEADER",
    "TENANT_HEADER",
    "AuditRecord",
    "CaseFileError",
    "CaseOpening",
    "DeadLetterRecord",
    "DecisionId",
    "DecisionRecord",
    "DecisionRequest",
    "EventRecord",
    "InvalidDecisionIdError",
    "PositionsSource",
    "Provenance",
    "RejectedError",
    "Rejection",
    "RunRecords",
    "SchemaError",
    "SchemaId",
    "ViewChecks",
    "ViewRecord",
    "append_events",
    "assemble",
    "calls_in_order",
    "case_from_dict",
    "case_to_dict",
    "decode_object",
    "load_cases",
    "load_event_lines",
    "opened",
    "run_records",
    "standard_headers",
    "validate",
    "write_case",
]
