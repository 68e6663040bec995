"""Every wire form the core produces validates against its published schema."""

from __future__ import annotations

import orjson
import pytest

from pipeline.core.case import case_to_dict
from pipeline.core.record import Provenance, audit_records, decision_record, view_record
from pipeline.core.run import run_dpm, run_summ
from pipeline.core.task import Budget
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.schemas import SchemaError, validate
from tests.cases import FIXTURES, load_fixture

CASE = load_fixture()


@pytest.mark.parametrize("runner", [run_dpm, run_summ])
def test_decision_view_and_audit_records_validate(runner: object) -> None:
    result = runner(CASE.trajectory, CASE.task, Budget(600), ExtractiveBackend())  # type: ignore[operator]
    provenance = Provenance("dec-1", (), "in-memory", "extractive", "unit")
    validate("decision.v1", decision_record(result, CASE.trajectory, CASE.task, Budget(600), provenance))
    validate("view.v1", view_record(result, CASE.ref, "dec-1"))
    for audit in audit_records(result, CASE.ref, provenance):
        validate("audit.v1", audit)


def test_case_files_round_trip_and_validate() -> None:
    raw = orjson.loads((FIXTURES / "loan_small.json").read_bytes())
    validate("case.v1", raw)
    validate("case.v1", case_to_dict(CASE))
    validate("case.v1", {**raw, "unknown_extra": {"ignored": True}})


def test_a_violation_names_its_path() -> None:
    raw = orjson.loads((FIXTURES / "loan_small.json").read_bytes())
    raw["events"][2]["seq"] = "three"
    with pytest.raises(SchemaError, match=r"at events/2/seq"):
        validate("case.v1", raw)
