"""Schema evolution: released schemas stay unchanged, a new version keeps its subject's rule, old records are read."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.evolution import MANIFEST, check
from pipeline.wire.resources import schemas_dir
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError, validate

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the package's schemas, to change."""
    copied = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), copied)
    return copied


def _read(folder: Path, name: str) -> Any:
    return orjson.loads((folder / name).read_bytes())


def _write(folder: Path, name: str, document: Any) -> None:
    (folder / name).write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def _next_version(folder: Path, subject: str) -> dict[str, Any]:
    """v2 of `subject`: v1 with the new version's names, nothing else changed yet."""
    document: dict[str, Any] = copy.deepcopy(_read(folder, f"{subject}.v1.json"))
    document["$id"] = f"dpm.{subject}.v2"
    document["properties"]["schema"] = {"const": f"dpm.{subject}.v2"}
    return document


def test_the_package_s_own_schemas_pass() -> None:
    assert check(schemas_dir()) == []


def test_a_released_schema_edited_in_place_or_deleted_fails(folder: Path) -> None:
    trigger = _read(folder, "trigger.v1.json")
    trigger["properties"]["budget_chars"]["maximum"] = 1_000
    _write(folder, "trigger.v1.json", trigger)
    (folder / "ledger.v1.json").unlink()
    assert check(folder) == [
        "ledger.v1.json: released, but missing or unreadable (a released schema stays, forever readable)",
        "trigger.v1.json: released schema edited in place (add a new version instead)",
        "compatibility.json: subject 'ledger' has no schema file",
    ]


def test_a_folder_without_its_own_manifest_is_checked_against_the_package_s(folder: Path) -> None:
    (folder / MANIFEST).unlink()
    assert check(folder) == []
    view = _read(folder, "view.v1.json")
    view["required"] = [*view["required"], "tenant_name"]
    _write(folder, "view.v1.json", view)
    assert check(folder) == ["view.v1.json: released schema edited in place (add a new version instead)"]


def test_reformatting_a_released_schema_is_not_an_edit(folder: Path) -> None:
    _write(folder, "event.v1.json", _read(folder, "event.v1.json"))  # other indentation, same document
    assert check(folder) == []


def test_a_new_version_that_breaks_its_subject_s_rule_fails(folder: Path) -> None:
    breaking = _next_version(folder, "trigger")  # FULL_TRANSITIVE: both directions
    breaking["properties"]["budget_chars"]["maximum"] = 1_000  # old triggers above 1,000 are not valid under v2
    breaking["properties"]["architectures"]["items"]["enum"].append("rag")  # old readers refuse a "rag" trigger
    _write(folder, "trigger.v2.json", breaking)
    assert check(folder) == [
        "trigger: v2 breaks FULL_TRANSITIVE against v1: records of v1 are not all valid under v2",
        "trigger: v2 breaks FULL_TRANSITIVE against v1: records of v2 are not all valid under v1",
    ]


def test_a_new_version_within_its_rule_passes_and_the_rule_decides_the_direction(folder: Path) -> None:
    widened = _next_version(folder, "decision")  # BACKWARD_TRANSITIVE: v2 must read every v1 record
    widened["required"] = [f for f in widened["required"] if f != "view_checks"]  # v2 reads records without it too
    _write(folder, "decision.v2.json", widened)
    assert check(folder) == []
    manifest = _read(folder, MANIFEST)
    manifest["subjects"]["decision"]["rule"] = "FORWARD"  # v1 readers would meet v2 records without view_checks
    _write(folder, MANIFEST, manifest)
    assert check(folder) == ["decision: v2 breaks FORWARD against v1: records of v2 are not all valid under v1"]


def test_transitive_rules_check_against_every_earlier_version_the_others_against_the_latest(folder: Path) -> None:
    v2 = _next_version(folder, "decision")
    v2["required"] = [f for f in v2["required"] if f != "view_checks"]
    _write(folder, "decision.v2.json", v2)
    v3 = copy.deepcopy(v2)
    v3["$id"], v3["properties"]["schema"] = "dpm.decision.v3", {"const": "dpm.decision.v3"}
    _write(folder, "decision.v3.json", v3)
    assert check(folder) == []
    v3["properties"]["view_checks"] = {"type": "null"}  # no longer reads the view checks v1 and v2 records hold
    _write(folder, "decision.v3.json", v3)
    assert check(folder) == [
        "decision: v3 breaks BACKWARD_TRANSITIVE against v1: records of v1 are not all valid under v3",
        "decision: v3 breaks BACKWARD_TRANSITIVE against v2: records of v2 are not all valid under v3",
    ]
    manifest = _read(folder, MANIFEST)
    manifest["subjects"]["decision"]["rule"] = "BACKWARD"
    _write(folder, MANIFEST, manifest)
    assert check(folder) == ["decision: v3 breaks BACKWARD against v2: records of v2 are not all valid under v3"]


def test_misnamed_files_gaps_and_subjects_without_a_rule_are_reported(folder: Path) -> None:
    (folder / "notes.json").write_text("{}")
    _write(folder, "view.v3.json", {**_read(folder, "view.v1.json"), "$id": "dpm.view.v3"})
    _write(folder, "extra.v1.json", {"$id": "dpm.other.v1", "type": "object"})
    assert check(folder) == [
        "extra.v1.json: its $id 'dpm.other.v1' does not name extra.v1",
        "notes.json: not named <subject>.v<N>.json",
        "extra: no compatibility rule in compatibility.json",
        "view: versions [1, 3] have a gap (they are numbered 1, 2, 3, ...)",
    ]


def test_the_command_prints_one_line_per_problem_and_exits_non_zero(folder: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["schemas", "check"]).exit_code == 0
    missing = runner.invoke(app, ["schemas", "check", "--dir", str(folder / "nowhere")])
    assert (missing.exit_code, missing.stdout.strip()) == (1, f"{folder / 'nowhere'}: not a folder of schemas")
    (folder / "audit.v1.json").unlink()
    failed = runner.invoke(app, ["schemas", "check", "--dir", str(folder)])
    assert failed.exit_code == 1
    assert failed.stdout.splitlines() == [
        "audit.v1.json: released, but missing or unreadable (a released schema stays, forever readable)",
        "compatibility.json: subject 'audit' has no schema file",
    ]


def test_an_optional_field_added_keeps_full_compatibility_as_on_the_wire(folder: Path) -> None:
    """Writers emit declared fields only and readers ignore unknown ones: an added optional field breaks nothing."""
    added = _next_version(folder, "event")  # FULL_TRANSITIVE
    added["properties"]["source_system"] = {"type": "string", "maxLength": 64}
    _write(folder, "event.v2.json", added)
    assert check(folder) == []
    added["required"] = [*added["required"], "source_system"]  # v1 records lack it: a v2 reader refuses them
    _write(folder, "event.v2.json", added)
    assert check(folder) == ["event: v2 breaks FULL_TRANSITIVE against v1: records of v1 are not all valid under v2"]


def _released_records(topic: str) -> list[dict[str, Any]]:
    """The records release 0.1.0 wrote on `topic` (tests/fixtures/release-0.1.0)."""
    lines = (FIXTURES / "release-0.1.0" / "outputs.jsonl").read_bytes().splitlines()
    return [orjson.loads(r["value"]) for r in map(orjson.loads, lines) if r["topic"] == topic]


def test_a_v1_decision_written_by_release_0_1_0_is_read_as_the_current_record() -> None:
    for value in _released_records("decisions"):
        validate(SchemaId.DECISION_V1, value)
        record = DecisionRecord.from_wire(value)
        assert record.events_topic is None  # v1: the offsets of its scope's events topic
        assert record.replay_target().view_sha256 == value["view_sha256"]  # what a replay checks is unchanged
        current = record.to_wire()
        validate(SchemaId.DECISION, current)
        assert {k: v for k, v in current.items() if k != "schema"} == {k: v for k, v in value.items() if k != "schema"}


def test_a_v2_decision_names_its_events_topic_and_an_unknown_version_is_refused() -> None:
    value = {**_released_records("decisions")[0], "schema": SchemaId.DECISION.value, "events_topic": "dpm.acme.events"}
    validate(SchemaId.DECISION, value)
    record = DecisionRecord.from_wire(value)
    assert record.events_topic == "dpm.acme.events"
    assert record.to_wire() == value
    with pytest.raises(SchemaError, match=r"unknown version 'dpm\.decision\.v9'"):
        DecisionRecord.from_wire({**value, "schema": "dpm.decision.v9"})
