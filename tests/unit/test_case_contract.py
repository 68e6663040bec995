"""One answer on sequence numbers (1..N) from schema, loader, producer and assembler; errors that cross processes."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
from pathlib import Path

import orjson
import pytest

import pipeline
from pipeline.core.errors import DpmError
from pipeline.wire.case_files import CaseFileError, load_case
from pipeline.wire.rejection import RejectedError, Rejection
from tests.cases import FIXTURES
from tests.processes import dpm_cli


def _case_file(tmp_path: Path, shift: int = 0, drop: int | None = None) -> Path:
    raw = orjson.loads((FIXTURES / "loan_small.json").read_bytes())
    raw["events"] = [{**e, "seq": e["seq"] + shift} for e in raw["events"] if e["seq"] != drop]
    path = tmp_path / "case.json"
    path.write_bytes(orjson.dumps(raw))
    return path


def test_a_case_numbered_from_zero_is_refused_at_load_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match=r"at events/0/seq: 0 is less than the minimum of 1") as refused:
        load_case(_case_file(tmp_path, shift=-1))
    assert "\n" not in str(refused.value)


def test_gaps_and_late_starts_are_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match=r"numbered 1\.\.9 without gaps, got 1\.\.10"):
        load_case(_case_file(tmp_path, drop=4))
    with pytest.raises(CaseFileError, match=r"numbered 1\.\.10 without gaps, got 3\.\.12"):
        load_case(_case_file(tmp_path, shift=2))


def test_produce_and_eval_refuse_it_the_same_way_and_send_nothing(tmp_path: Path) -> None:
    bad = _case_file(tmp_path, shift=-1)
    env = {"DPM_BOOTSTRAP": "127.0.0.1:9", "DPM_HOME": str(tmp_path / "home")}  # never reached: nothing is sent
    for command in (("produce", "--cases", str(bad)), ("eval", "--cases", str(bad), "--out", str(tmp_path / "o"))):
        result = dpm_cli(*command, env=env, timeout_s=120)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1, result.stderr
        assert "less than the minimum of 1" in result.stderr


def test_a_huge_invalid_value_gets_a_short_error_naming_the_field_and_its_size(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    huge = {"tenant": "acme", "case_id": "c-1", "seq": "9" * 5_000_000, "kind": "doc", "text": "t"}
    nul = {"tenant": "acme", "case_id": "c-1", "seq": 1, "kind": "\u0000", "text": "t"}
    env = {"DPM_BOOTSTRAP": "127.0.0.1:9", "DPM_HOME": str(tmp_path / "home")}
    for bad, expected in ((huge, "at seq: a string of 5,000,000 characters is not of type 'integer'"),
                          (nul, "at kind:")):  # fmt: skip
        events.write_bytes(orjson.dumps(bad))
        result = dpm_cli("produce", "--events", str(events), env=env, timeout_s=120)
        assert result.returncode == 1
        assert len(result.stderr) < 400, result.stderr[:400]
        assert expected in result.stderr


def _all_error_types() -> list[type[DpmError]]:
    for module in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[DpmError]] = []
    pending: list[type[DpmError]] = [DpmError]
    while pending:
        error = pending.pop()
        found.append(error)
        pending.extend(error.__subclasses__())
    return found


def test_every_error_type_survives_a_process_boundary() -> None:
    """Eval worker processes send errors back pickled: each must arrive as the same one-line error."""
    errors = _all_error_types()
    assert len(errors) > 10
    for error in errors:
        raised = error(Rejection.SCHEMA, "a detail") if issubclass(error, RejectedError) else error("a detail")
        again = pickle.loads(pickle.dumps(raised))  # noqa: S301 - our own bytes, just made
        assert type(again) is error
        assert str(again) == str(raised)
