"""The faust Summ-only baseline against the real broker: N+1 audit records, offline parity, changelog recovery."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import orjson

from pipeline.core.events import Event
from pipeline.core.hashing import text_digest
from pipeline.core.model import Purpose
from pipeline.core.run import SummVariant, run_summ
from pipeline.core.task import Architecture, Budget
from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.llm.extractive.backend import ExtractiveBackend
from pipeline.services.cluster import pipeline_processes as processes
from pipeline.services.read_outputs import await_decisions, load_outputs
from pipeline.wire.audit import calls_in_order
from pipeline.wire.event import CaseOpening
from pipeline.wire.trigger import DecisionId, DecisionKey, DecisionRequest
from tests.pipeline_support import await_dead_letters, create_topics, small_cases, worker_env
from tests.processes import dpm_cli

BUDGET = 900


def test_baseline_decides_with_n_plus_one_audits_and_recovers_its_summaries_after_restart(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    case = small_cases(per_domain=1)[0]
    producer = EventProducer(kafka_config, topic_names)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))

    def trigger(trigger_id: str) -> None:
        producer.trigger(DecisionRequest(trigger_id, case.ref, case.task, BUDGET, (Architecture.SUMM,), positions,
                                         len(positions), case.label))  # fmt: skip

    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    trigger("first")
    with processes([["baseline", "--budgets", "700"]], env, tmp_path / "run1"):
        first = await_decisions(kafka_config, topic_names, 1, timeout_s=120, cipher=case_keys)
        # The baseline is at-least-once: only a decided trigger its changelog holds survives a restart.
        decided = f"{topic_names.prefix}-baseline-summ-decided-changelog"
        deadline = time.monotonic() + 30
        while not any(case.ref.key.encode() in (r.key or b"") for r in read_topic(kafka_config, decided)):
            assert time.monotonic() < deadline, "the decided trigger never reached the changelog"
            time.sleep(0.5)
    record = first.decisions[DecisionKey(case.ref.tenant, DecisionId("first", Architecture.SUMM))]
    assert record.llm_calls == len(case.trajectory) + 1
    purposes = [c.request.purpose for c in calls_in_order(first.audits[record.key])]
    assert purposes == [Purpose.SUMMARIZE] * len(case.trajectory) + [Purpose.DECIDE]
    offline = run_summ(case.trajectory, case.task, Budget(BUDGET), ExtractiveBackend())
    assert record.view_sha256 == text_digest(offline.view_text), "the online baseline equals the offline run"

    # The events' offsets are committed: a new member must take the summaries from the changelog.
    trigger("second")
    trigger("first")  # decided before the restart: the recovered table refuses it (a redelivered record is skipped)
    producer.close()
    with processes([["baseline", "--budgets", "700"]], env, tmp_path / "run2"):
        second = await_decisions(kafka_config, topic_names, 2, timeout_s=120, cipher=case_keys)
        letters = await_dead_letters(kafka_config, topic_names, 1, timeout_s=60)
    # Never decided twice, and refused once: a redelivery of the refused record is skipped too.
    final = load_outputs(kafka_config, topic_names, cipher=case_keys)
    seen = f"dead letters {letters}, {final.duplicates} duplicate(s), decisions {sorted(map(str, final.decisions))}"
    assert letters == [("duplicate", "first")], seen
    assert final.duplicates == 0, seen
    assert {d.trigger_id for d in final.decision_ids()} == {"first", "second"}, seen
    again = second.decisions[DecisionKey(case.ref.tenant, DecisionId("second", Architecture.SUMM))]
    assert again.view_sha256 == record.view_sha256
    assert again.outcome.label == record.outcome.label

    def step_latencies(trigger_id: str) -> list[float]:
        calls = calls_in_order(second.audits[DecisionKey(case.ref.tenant, DecisionId(trigger_id, Architecture.SUMM))])
        return [c.response.latency_s for c in calls if c.request.purpose is Purpose.SUMMARIZE]

    # Measured latencies of the N steps are carried, not re-measured: the steps were recovered, not redone.
    assert step_latencies("second") == step_latencies("first")


def _member_client_ids(config: dict[str, str], group: str) -> set[str]:
    admin = admin_client(config)  # held: the futures resolve only while their client lives
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return {member.client_id for member in described.members}


def test_baseline_honours_the_client_config_and_its_buffered_decisions_verify_from_the_record(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """DPM_KAFKA_CONFIG reaches the baseline's own clients; buffered views replay MATCH without a model."""
    create_topics(kafka_config, topic_names)
    probe = f"dpm-client-probe-{uuid.uuid4().hex[:8]}"
    properties = tmp_path / "client.properties"
    properties.write_text(f"# what an operator's SASL/TLS file would hold, plus an id to find\nclient.id={probe}\n")
    case = small_cases(per_domain=1)[0]
    loose = case.trajectory.char_length * 2  # everything fits: no summary call, the view is the events themselves
    producer = EventProducer(kafka_config, topic_names)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (loose,))))
    producer.trigger(DecisionRequest("buffered", case.ref, case.task, loose, (Architecture.SUMM,), positions,
                                     len(positions), case.label))  # fmt: skip
    producer.close()
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_KAFKA_CONFIG": str(properties)}
    with processes([["baseline", "--budgets", str(loose), "--variant", "buffered"]], env, tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=120, cipher=case_keys)
        assert _member_client_ids(kafka_config, f"{topic_names.prefix}-baseline") == {probe}
    record = outputs.decisions[DecisionKey(case.ref.tenant, DecisionId("buffered", Architecture.SUMM))]
    assert record.variant is SummVariant.BUFFERED
    assert record.llm_calls == 1  # the decision only
    replayed = dpm_cli("replay", "--all", "--verify-recorded", env=env)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "MATCH" in replayed.stdout


def test_one_oversize_event_is_a_dead_letter_and_later_cases_are_still_decided_and_sigusr1_dumps_its_stacks(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)  # the big event and the next case share a partition
    big, later = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names)
    huge = Event(big.ref, 1, "document", "Scanned appendix. " * 28_000)  # about 500 KB, valid
    producer.append([huge])
    positions = tuple(producer.append(later.trajectory.events, CaseOpening(later.task, (BUDGET,))))
    producer.trigger(DecisionRequest("after-big", later.ref, later.task, BUDGET, (Architecture.SUMM,), positions,
                                     len(positions)))  # fmt: skip
    producer.close()
    with processes([["baseline"]], worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs") as procs:
        outputs = await_decisions(kafka_config, topic_names, 1, timeout_s=120, cipher=case_keys)
        assert procs[0].poll() is None, "the baseline is still running"
        procs[0].send_signal(signal.SIGUSR1)  # faulthandler's dump, not mode's (which runs on the loop itself)
        time.sleep(1.0)
        assert procs[0].poll() is None, "the baseline goes on after writing its stacks"
    log = (tmp_path / "logs" / "baseline-0.log").read_text(errors="replace")
    assert "most recent call first" in log
    assert outputs.decision_ids() == {DecisionId("after-big", Architecture.SUMM)}
    letters = [orjson.loads(r.value or b"") for r in read_topic(kafka_config, topic_names.dlq)]
    assert [(letter["reason"], letter["source_topic"]) for letter in letters] == [("oversize", topic_names.events)]
