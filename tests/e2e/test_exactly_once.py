"""End to end against the real broker: worker processes, exactly-once decisions, crashes, isolation, replay."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import orjson
import pytest

from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayStatus
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes as processes
from pipeline.services.read_outputs import await_decisions
from pipeline.services.replay import registry_backends, replay_many
from pipeline.wire.trigger import DecisionId, DecisionRequest
from tests.pipeline_support import committed_records, create_topics, small_cases, worker_env
from tests.processes import dpm_cli

TRIGGERS = 200


def _produce_triggers(config: dict[str, str], names: TopicNames, count: int) -> set[str]:
    """Appends 8 short cases and triggers each repeatedly (budgets vary) until `count` triggers are out."""
    producer = EventProducer(config, names)
    cases = small_cases()
    positions = {c.ref: tuple(producer.append(c.trajectory.events)) for c in cases}
    ids = set()
    for n in range(count):
        case = cases[n % len(cases)]
        request = DecisionRequest(f"t{n:04d}", case.ref, case.task, 600 + 10 * n, (Architecture.DPM,),
                                  positions[case.ref], len(positions[case.ref]), case.label)  # fmt: skip
        producer.trigger(request)
        ids.add(f"{request.trigger_id}:dpm")
    producer.close()
    return ids


def _assert_exactly_once(
    config: dict[str, str], names: TopicNames, ids: set[str], timeout_s: float, keys: CaseKeys
) -> None:
    outputs = await_decisions(config, names, len(ids), timeout_s, cipher=keys)
    published = [orjson.loads(r.value or b"")["decision_id"] for r in read_topic(config, names.decisions)]
    assert sorted(published) == sorted(ids), "every trigger has exactly one committed decision"
    assert outputs.duplicates == 0
    views = [orjson.loads(r.value or b"")["decision_id"] for r in committed_records(config, names.views, len(ids))]
    assert sorted(views) == sorted(ids)
    audits = [orjson.loads(r.value or b"")["decision_id"] for r in committed_records(config, names.audit, 2 * len(ids))]
    assert len(audits) == 2 * len(ids), "two model calls, two audit records, per DPM decision"


def test_three_workers_give_exactly_one_decision_per_trigger_and_every_replay_matches(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with processes([["worker"], ["worker"], ["worker"]], env, tmp_path / "logs"):
        ids = _produce_triggers(kafka_config, topic_names, TRIGGERS)
        _assert_exactly_once(kafka_config, topic_names, ids, 180, case_keys)
    outputs = await_decisions(kafka_config, topic_names, len(ids), 10, cipher=case_keys)
    log = KafkaEventLog(kafka_config, topic_names.events)
    lines = replay_many(outputs.decisions.values(), outputs.views, outputs.audits, log,
                        registry_backends(Settings.from_env({}).model, "extractive"), cipher=case_keys)  # fmt: skip
    log.close()
    assert {line.report.status for line in lines} == {ReplayStatus.MATCH}
    assert len({r.worker_id for r in outputs.decisions.values()}) >= 2, "the group shared the work"


def test_a_worker_killed_mid_run_loses_nothing_and_duplicates_nothing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with processes([["worker", "--batch-size", "2"]] * 3, env, tmp_path / "logs") as procs:
        ids = _produce_triggers(kafka_config, topic_names, TRIGGERS)
        deadline = time.monotonic() + 120
        while len(list(read_topic(kafka_config, topic_names.decisions))) < TRIGGERS // 4:
            assert time.monotonic() < deadline, "workers made no progress"
            time.sleep(0.5)
        procs[0].send_signal(signal.SIGKILL)
        _assert_exactly_once(kafka_config, topic_names, ids, 180, case_keys)
    assert procs[0].returncode == -signal.SIGKILL


def test_a_trigger_naming_another_tenants_offsets_gets_no_decision_and_a_dead_letter(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    producer = EventProducer(kafka_config, topic_names)
    victim = small_cases(per_domain=1, tenant="tenant-b")[0]
    positions = tuple(producer.append(victim.trajectory.events))
    thief = CaseRef("tenant-a", victim.ref.case_id)
    producer.trigger(DecisionRequest("steal", thief, victim.task, 800, (Architecture.DPM,), positions))
    producer.trigger(DecisionRequest("honest", victim.ref, victim.task, 800, (Architecture.DPM,), positions))
    producer.close()
    with processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=60, cipher=case_keys)
        deadline = time.monotonic() + 30
        letters: list[dict[str, object]] = []
        while not letters and time.monotonic() < deadline:
            letters = [orjson.loads(r.value or b"") for r in read_topic(kafka_config, topic_names.dlq)]
            time.sleep(0.5)
    assert outputs.decision_ids() == {DecisionId("honest", Architecture.DPM)}
    assert [letter["reason"] for letter in letters] == ["cross-tenant"]
    assert "tenant-b" in str(letters[0]["detail"])


@pytest.mark.any_broker  # which tenant a decision belongs to is in our keys and records, not the broker's doing
def test_two_tenants_using_one_trigger_id_get_a_decision_each_and_every_reader_keeps_both(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    cases = [small_cases(per_domain=1, tenant=tenant)[0] for tenant in ("bank-a", "bank-b")]
    producer = EventProducer(kafka_config, topic_names)
    for case in cases:
        positions = tuple(producer.append(case.trajectory.events))
        producer.trigger(DecisionRequest("shared-id", case.ref, case.task, 900, (Architecture.DPM,), positions,
                                         len(positions), case.label))  # fmt: skip
    producer.close()
    with processes([["worker"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 2, timeout_s=60, cipher=case_keys)
    assert {str(key) for key in outputs.decisions} == {"bank-a/shared-id:dpm", "bank-b/shared-id:dpm"}
    assert outputs.duplicates == 0  # two tenants' decisions, not one decided twice
    assert set(outputs.views) == set(outputs.decisions) == set(outputs.audits)
    assert {key[0] for key in outputs.triggers} == {"bank-a", "bank-b"}
    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    both = dpm_cli("replay", "--decision", "shared-id:dpm", "--json", env=env)
    assert both.returncode == 0, both.stderr
    assert sorted((r["tenant"], r["status"]) for r in orjson.loads(both.stdout)) == [("bank-a", "MATCH"),
                                                                                    ("bank-b", "MATCH")]  # fmt: skip
    one = dpm_cli("replay", "--decision", "shared-id:dpm", "--tenant", "bank-b", "--json", env=env)
    assert [r["tenant"] for r in orjson.loads(one.stdout)] == ["bank-b"]
