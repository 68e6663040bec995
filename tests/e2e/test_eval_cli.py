"""`dpm cases generate`, `dpm eval` and `dpm tams` end to end, in-process and through Kafka."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.kafka_support import unique_prefix
from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

DESIGN_FIELDS = {"case_id", "domain", "arch", "budget", "budget_chars", "frp", "rcs", "eda", "crr", "llm_calls",
                 "wall_s", "view_sha256", "decision"}  # fmt: skip


def _dpm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = dpm_cli(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def small_cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cases")
    _dpm("cases", "generate", "--out", str(folder), "--per-domain", "1", "--length", "6000", "--seed", "11")
    return folder


def _rows(folder: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines()]


def test_eval_writes_results_stats_report_and_figures(small_cases: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _dpm(
        "eval",
        "--cases",
        str(small_cases),
        "--out",
        str(out),
        "--budgets",
        "tight,900",
        "--jobs",
        "2",
        "--determinism",
        "2",
        "--scaling",
        "5,50",
    )
    rows = _rows(out)
    assert len(rows) == 4 * 2 * (2 + 2)  # cases x archs x (budgets + rhos)
    assert set(rows[0]) >= DESIGN_FIELDS
    assert {r["budget"] for r in rows} == {"tight", "900", "rho=5", "rho=50"}
    stats = orjson.loads((out / "stats.json").read_bytes())
    frp = stats["budgets"]["tight"]["metrics"]["frp"]
    assert {"mean_dpm", "mean_summ", "delta", "p_value", "ci_low", "ci_high", "cohens_h", "n"} <= set(frp)
    assert (frp["p_method"], frp["permutations"]) == ("exact", 16)
    assert stats["per_arch"]["dpm"]["audit_records_per_decision"] == 2
    assert stats["per_arch"]["summ"]["audit_records_per_decision"] > 20
    assert stats["determinism"]["archs"]["dpm"]["byte_identical_cases"] == 4
    assert [p["rho"] for p in stats["scaling"]["points"]] == [5, 50]
    report = (out / "report.md").read_text()
    assert "| budget | chars | axis | DPM | Summ | delta | 95% CI | p (method) | h | n |" in report
    assert "(exact) |" in report  # 4 paired cases: every sign flip is enumerated
    for figure in ("axes_by_budget.png", "per_arch.png", "scaling.png", "determinism.png"):
        assert (out / figure).read_bytes().startswith(b"\x89PNG")
    tams = _dpm("tams", "--results", str(out), "--rho", "1000")
    assert tams.stdout.startswith("DPM")


def test_external_case_files_run_unchanged(tmp_path: Path) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "loan_small.json"
    raw = orjson.loads(fixture.read_bytes())
    raw["domain"] = "hiring"  # a domain without a rule table: generic extraction, label from its space
    raw["label_space"] = ["HIRE", "DECLINE"]
    raw["label"] = "DECLINE"
    raw["extra_field"] = {"ignored": True}
    folder = tmp_path / "ext"
    folder.mkdir()
    (folder / "hiring.json").write_bytes(orjson.dumps(raw))
    _dpm("eval", "--cases", str(folder), "--out", str(tmp_path / "out"), "--budgets", "600", "--jobs", "1")
    assert {r["decision"] for r in _rows(tmp_path / "out")} <= {"HIRE", "DECLINE"}


def test_a_held_apart_voice_evaluates_with_its_own_label_space(tmp_path: Path) -> None:
    cases = tmp_path / "notes"
    _dpm("cases", "generate", "--out", str(cases), "--voice", "notes", "--hard", "--domains", "loan",
         "--per-domain", "3", "--length", "8000")  # fmt: skip
    assert sorted(p.name for p in cases.iterdir()) == [f"notes-loan-20260420-00{n}.json" for n in range(3)]
    _dpm("eval", "--cases", str(cases), "--out", str(tmp_path / "out"), "--budgets", "moderate", "--jobs", "1")
    rows = _rows(tmp_path / "out")
    assert {r["label"] for r in rows} == {"APPROVE", "DENY", "PEND"}
    assert all(r["decision"] == r["label"] for r in rows if r["arch"] == "dpm")


def test_a_bad_case_file_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "broken.json").write_text('{"schema": "dpm.case.v1", "case_id": "x"}')
    result = subprocess.run([sys.executable, "-m", "pipeline", "eval", "--cases", str(folder), "--out",
                             str(tmp_path / "o")], capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 1
    assert "broken.json" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_kafka_path_gives_the_same_results_as_the_in_memory_path(
    small_cases: Path, tmp_path: Path, kafka_bootstrap: str
) -> None:
    common = ("--cases", str(small_cases), "--budgets", "700,1500", "--jobs", "1")
    _dpm("eval", *common, "--out", str(tmp_path / "mem"))
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": unique_prefix(), "DPM_HOME": str(tmp_path / "h")}
    _dpm("eval", *common, "--out", str(tmp_path / "kafka"), "--via-kafka", env=env)

    def comparable(folder: Path) -> list[dict[str, object]]:
        varying = {"wall_s"}  # measured time is the only thing allowed to differ
        return sorted(({k: v for k, v in r.items() if k not in varying} for r in _rows(folder)),
                      key=lambda r: (str(r["case_id"]), str(r["budget"]), str(r["arch"])))  # fmt: skip

    assert comparable(tmp_path / "mem") == comparable(tmp_path / "kafka")
