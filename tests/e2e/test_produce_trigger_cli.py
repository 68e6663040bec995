"""`dpm produce` and `dpm trigger` as a user runs them: all-or-nothing input, manifests, decisions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.case_files import write_case
from pipeline.wire.decision import PositionsSource
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import dpm_cli

# What this proves is the command's own (parsing, rendering, reports, readers): `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker


def test_a_bad_file_sends_nothing_and_a_good_run_is_decided(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    cases = small_cases(per_domain=1)
    folder = tmp_path / "cases"
    for case in cases[:2]:
        write_case(case, folder)
    broken = orjson.loads((folder / f"{cases[0].ref.case_id}.json").read_bytes())
    broken["case_id"] = "broken-case"
    broken["events"][3]["seq"] = -4
    (folder / "zz-broken.json").write_bytes(orjson.dumps(broken))

    refused = dpm_cli("produce", "--cases", str(folder), env=env)
    assert refused.returncode == 1
    assert "zz-broken.json" in refused.stderr
    assert "Traceback" not in refused.stderr
    log = KafkaEventLog(kafka_config, topic_names.events)
    assert all(log.scan(c.ref).records == () for c in cases[:2]), "nothing was sent"

    (folder / "zz-broken.json").unlink()
    manifest = tmp_path / "manifest.json"
    produced = dpm_cli("produce", "--cases", str(folder), "--manifest", str(manifest), env=env)
    assert produced.returncode == 0, produced.stderr
    assert f"appended {sum(len(c.trajectory) for c in cases[:2])} event(s) to {topic_names.events}" in produced.stdout
    entries = orjson.loads(manifest.read_bytes())
    lengths = {c.ref.case_id: len(c.trajectory) for c in cases[:2]}
    assert {e["case_id"]: len(e["positions"]) for e in entries} == lengths
    for entry in entries:
        assert len(log.scan(CaseRef(entry["tenant"], entry["case_id"])).records) == lengths[entry["case_id"]]
    log.close()

    triggered = dpm_cli("trigger", "--manifest", str(manifest), "--budget", "moderate", "--arch", "dpm", env=env)
    assert triggered.returncode == 0, triggered.stderr
    assert triggered.stdout.count("triggered") == 2
    with pipeline_processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 2, timeout_s=60, cipher=case_keys)
    assert {d.positions_source for d in outputs.decisions.values()} == {PositionsSource.TRIGGER}
    labels = {c.ref.case_id: c.label for c in cases[:2]}
    assert {d.case.case_id: d.outcome.label for d in outputs.decisions.values()} == labels


def test_trigger_without_a_manifest_needs_a_budget_in_characters(kafka_bootstrap: str) -> None:
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": "unused"}
    result = dpm_cli("trigger", "--tenant", "a", "--case", "b", "--budget", "tight", env=env)
    assert result.returncode == 1
    assert "budget in characters" in result.stderr


def test_json_lines_events_are_validated_line_by_line(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    good = [{"tenant": "acme", "case_id": "j1", "seq": s, "kind": "note", "text": f"event {s}"} for s in (1, 2, 3)]
    lines = tmp_path / "events.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in good) + b'\n{"tenant": "acme", "seq": 4}\n')
    refused = dpm_cli("produce", "--events", str(lines), env=env)
    assert refused.returncode == 1
    assert "events.jsonl:4" in refused.stderr
    log = KafkaEventLog(kafka_config, topic_names.events)
    assert log.scan(CaseRef("acme", "j1")).records == ()
    lines.write_bytes(b"\n".join(orjson.dumps(e) for e in good) + b"\n")
    assert dpm_cli("produce", "--events", str(lines), env=env).returncode == 0
    assert len(log.scan(CaseRef("acme", "j1")).records) == 3
    log.close()
