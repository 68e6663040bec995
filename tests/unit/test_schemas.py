"""Every wire form validates against its published schema and round-trips: decode(encode(record)) == record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.core.run import RunResult, SummVariant, run_dpm, run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.wire.audit import AuditRecord
from pipeline.wire.case_files import case_from_dict, case_to_dict
from pipeline.wire.dead_letter import DeadLetterRecord
from pipeline.wire.decision import DecisionRecord, PositionsSource, Provenance
from pipeline.wire.event import CaseOpening, EventRecord, opened
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.run_records import run_records
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionId, DecisionRequest, InvalidDecisionIdError
from pipeline.wire.validation import SchemaError, validate
from pipeline.wire.view import ViewRecord
from tests.cases import FIXTURES, load_fixture

CASE = load_fixture()
BUDGET = Budget(600)
RUNS: dict[str, Callable[[], RunResult]] = {
    "dpm": lambda: run_dpm(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()),
    "summ-rewrite": lambda: run_summ(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend()),
    "summ-buffered": lambda: run_summ(CASE.trajectory, CASE.task, BUDGET, ExtractiveBackend(), SummVariant.BUFFERED),
}


def _wire(record: Any, schema: SchemaId) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(record.encode())
    validate(schema, value)
    assert value["schema"] == schema.value
    return value


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
def test_view_decision_and_audit_records_validate_and_round_trip(run: Callable[[], RunResult]) -> None:
    result = run()
    decision_id = DecisionId("trig:with:colons", result.architecture)
    positions = tuple(LogPosition(2, 100 + i) for i in range(len(CASE.trajectory)))
    provenance = Provenance(decision_id, positions, PositionsSource.TRIGGER, "extractive", "unit")
    published = run_records(result, CASE.trajectory, task=CASE.task, budget=BUDGET, provenance=provenance)
    assert DecisionRecord.from_wire(_wire(published.decision, SchemaId.DECISION)) == published.decision
    assert ViewRecord.from_wire(_wire(published.view, SchemaId.VIEW)) == published.view
    assert len(published.audits) == len(result.calls)
    for audit in published.audits:
        assert AuditRecord.from_wire(_wire(audit, SchemaId.AUDIT)) == audit


def test_triggers_round_trip_with_and_without_optional_fields() -> None:
    full = DecisionRequest("t-1", CASE.ref, CASE.task, 700, (Architecture.DPM, Architecture.SUMM),
                           (LogPosition(0, 1), LogPosition(0, 5)), 2, CASE.label)  # fmt: skip
    bare = DecisionRequest("t-2", CASE.ref, CASE.task, 700, (Architecture.SUMM,))
    for request in (full, bare):
        _wire(request, SchemaId.TRIGGER)
        assert DecisionRequest.decode(request.encode()) == request


def test_events_round_trip_and_the_opening_rides_on_seq_1_only() -> None:
    records = opened(CASE.trajectory.events, CaseOpening(CASE.task, (700, 1400)))
    assert [r.opening is not None for r in records] == [e.seq == 1 for e in CASE.trajectory.events]
    for record in records:
        _wire(record, SchemaId.EVENT)
        assert EventRecord.decode(record.encode()) == record


def test_dead_letters_round_trip_with_and_without_a_key() -> None:
    for key in (b"acme/case-1", None):
        raw = RawRecord(LogPosition(3, 42), key, b"\x00 not json")
        letter = DeadLetterRecord.of(raw, source_topic="t.triggers", reason=Rejection.NOT_JSON, detail="x" * 5000,
                                     worker_id="w")  # fmt: skip
        assert len(letter.detail) == 2000
        assert DeadLetterRecord.from_wire(_wire(letter, SchemaId.DEAD_LETTER)) == letter
        assert letter.record_key == key


def test_a_dead_letter_of_any_record_fits_in_a_record() -> None:
    """900 KB of value and 600 KB of key: cut, with their sizes and digests; the Kafka key becomes a digest."""
    raw = RawRecord(LogPosition(0, 7), b"k" * 600_000, b"\xff" * 900_000)
    letter = DeadLetterRecord.of(raw, source_topic="t.triggers", reason=Rejection.OVERSIZE, detail="big",
                                 worker_id="w")  # fmt: skip
    wire = _wire(letter, SchemaId.DEAD_LETTER)
    assert len(letter.encode()) < 400_000
    assert wire["original_value_size"] == 900_000
    assert wire["original_key_size"] == 600_000
    assert letter.original_value.truncated
    assert letter.original_key is not None
    assert letter.record_key == f"sha256:{letter.original_key.sha256}".encode()
    assert DeadLetterRecord.from_wire(wire) == letter


def test_decision_ids_build_and_parse_themselves() -> None:
    decision_id = DecisionId("case-7@tight:x", Architecture.SUMM)
    assert str(decision_id) == "case-7@tight:x:summ"
    assert DecisionId.parse(str(decision_id)) == decision_id
    for bad in ("no-colon", ":dpm", "t:gpt"):
        with pytest.raises(InvalidDecisionIdError):
            DecisionId.parse(bad)


def test_undecodable_records_are_rejections_with_a_reason() -> None:
    with pytest.raises(RejectedError) as not_json:
        EventRecord.decode(b"[1]")
    assert not_json.value.reason is Rejection.NOT_JSON
    with pytest.raises(RejectedError) as schema:
        DecisionRequest.decode(orjson.dumps({"schema": SchemaId.TRIGGER.value, "tenant": "a"}))
    assert schema.value.reason is Rejection.SCHEMA
    with pytest.raises(RejectedError) as oversize:
        DecisionRequest.decode(b" " * 2_000_000)
    assert oversize.value.reason is Rejection.OVERSIZE


def test_case_files_round_trip_and_validate() -> None:
    raw = orjson.loads((FIXTURES / "loan_small.json").read_bytes())
    validate(SchemaId.CASE, raw)
    validate(SchemaId.CASE, case_to_dict(CASE))
    assert case_from_dict(case_to_dict(CASE)) == CASE
    validate(SchemaId.CASE, {**raw, "unknown_extra": {"ignored": True}})


def test_a_violation_names_its_path() -> None:
    raw = orjson.loads((FIXTURES / "loan_small.json").read_bytes())
    raw["events"][2]["seq"] = "three"
    with pytest.raises(SchemaError, match=r"at events/2/seq"):
        validate(SchemaId.CASE, raw)


def test_every_schema_id_names_a_published_schema_file() -> None:
    for schema in SchemaId:
        document = orjson.loads((FIXTURES.parents[1] / "schemas" / f"{schema.file_stem}.json").read_bytes())
        assert document["properties"]["schema"]["const"] == schema.value
