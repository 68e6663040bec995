"""Clients that are not ours: Kafka's own console producer and consumer drive a decision, and a plain
consumer routes every record by its standard headers (CloudEvents binding, schema id, tenant)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from pipeline.config.settings import Settings
from pipeline.core.case import Case
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, create_pipeline_topics
from pipeline.kafka.local.broker_runtime import KafkaRelease, ensure_broker_jars, java_executable
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening, opened
from pipeline.wire.headers import standard_headers
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.trigger import DecisionRequest
from tests.kafka_support import every_record
from tests.pipeline_support import small_cases, worker_env

BUDGET = 900


class _KafkaTools:
    """Kafka's console producer and consumer, from the jars the local broker runs on."""

    def __init__(self, bootstrap: str) -> None:
        settings = Settings.from_env()
        self.release = KafkaRelease(settings.kafka.version)
        self._libs = ensure_broker_jars(settings.paths.cache_dir, settings.kafka.version)
        self._java = java_executable(settings.paths.java_home)
        self._bootstrap = bootstrap

    def _run(self, main_class: str, *args: str, stdin: str = "", timeout_s: float = 180) -> str:
        command = [self._java, "-Xmx256m", "-cp", f"{self._libs}/*", main_class, "--bootstrap-server",
                   self._bootstrap, *args]  # fmt: skip
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def produce(self, topic: str, lines: list[tuple[str, bytes]]) -> None:
        """`key<TAB>value` lines through kafka-console-producer (acks=all, idempotent by default)."""
        text = "".join(f"{key}\t{value.decode()}\n" for key, value in lines)
        self._run(self.release.console_producer, "--topic", topic, "--property", "parse.key=true",
                  "--property", "key.separator=\t", stdin=text)  # fmt: skip

    def consume_one(self, topic: str) -> tuple[str, str, str]:
        """(headers, key, value) of the first committed record, through kafka-console-consumer."""
        out = self._run(self.release.console_consumer, "--topic", topic, "--from-beginning", "--max-messages", "1",
                        "--isolation-level", "read_committed", "--timeout-ms", "120000",
                        "--property", "print.headers=true", "--property", "print.key=true")  # fmt: skip
        headers, key, value = out.strip().splitlines()[-1].split("\t", 2)
        return headers, key, value


def test_kafkas_console_tools_produce_a_case_and_a_trigger_and_read_the_decision_back(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_pipeline_topics(kafka_config, topic_names, 1, replication=1)  # one partition: any partitioner agrees
    case = small_cases(per_domain=1, tenant=f"interop-{uuid.uuid4().hex[:6]}")[0]
    tools = _KafkaTools(kafka_bootstrap)
    events = [(r.event.key, orjson.dumps(r.to_wire())) for r in opened(case.trajectory.events, None)]
    tools.produce(topic_names.events, events)
    # No positions: the worker scans the case's partition (positions_source: scan).
    trigger = DecisionRequest("console-1", case.ref, case.task, BUDGET, (Architecture.DPM,))
    tools.produce(topic_names.triggers, [(case.ref.key, trigger.encode())])
    env = {**worker_env(kafka_bootstrap, topic_names, tmp_path), "DPM_ENCRYPTION": "off"}  # readable by anyone
    with pipeline_processes([["worker"]], env, tmp_path / "logs"):
        headers, key, value = tools.consume_one(topic_names.decisions)
    decision = orjson.loads(value)
    assert key == decision["decision_id"] == "console-1:dpm"
    assert decision["decision"]["label"] in case.task.label_space
    assert decision["positions_source"] == "scan"
    assert len(decision["positions"]) == len(case.trajectory.events)
    assert f"ce_type:{SchemaId.DECISION.value}" in headers
    assert "ce_specversion:1.0" in headers


TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _produce(config: dict[str, str], names: TopicNames, keys: CaseKeys, case: Case) -> None:
    """The case through our producer; its trigger, carrying a caller's trace context, and a malformed one."""
    producer = EventProducer(config, names, keys)
    positions = tuple(producer.append(case.trajectory.events, CaseOpening(case.task, (BUDGET,))))
    producer.close()
    both = (Architecture.DPM, Architecture.SUMM)
    trigger = DecisionRequest("h-1", case.ref, case.task, BUDGET, both, positions, len(positions))
    headers = standard_headers(SchemaId.TRIGGER, source="/caller", event_id="h-1", tenant=case.ref.tenant)
    plain = Producer(config)
    partition = case_partition(case.ref, 3)
    plain.produce(names.triggers, key=case.ref.key.encode(), value=trigger.encode(), partition=partition,
                  headers=[*headers, ("traceparent", TRACEPARENT)])  # fmt: skip
    plain.produce(names.triggers, key=case.ref.key.encode(), value=b"{not json", partition=partition)
    plain.flush(10)


@pytest.mark.any_broker  # the headers are ours, set by our producers: no broker release changes them
def test_every_record_carries_the_standard_headers(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_pipeline_topics(kafka_config, topic_names, 3, replication=1)
    case = small_cases(per_domain=1, tenant=f"hdr-{uuid.uuid4().hex[:6]}")[0]
    _produce(kafka_config, topic_names, case_keys, case)
    env = worker_env(kafka_bootstrap, topic_names, tmp_path)
    with pipeline_processes([["worker"], ["baseline", "--budgets", str(BUDGET)]], env, tmp_path / "logs"):
        await_decisions(kafka_config, topic_names, 2, timeout_s=180, cipher=case_keys)
        deadline = time.monotonic() + 60
        while not list(every_record(kafka_config, topic_names.dlq)):  # the malformed trigger's dead letter
            assert time.monotonic() < deadline, "no dead letter for the malformed trigger"
            time.sleep(0.5)
    seen: set[tuple[bytes, bytes]] = set()
    for topic in (topic_names.events, topic_names.triggers, topic_names.views, topic_names.decisions,
                  topic_names.audit, topic_names.dlq, topic_names.keys):  # fmt: skip
        records = list(every_record(kafka_config, topic))
        assert records, topic
        for record in records:
            value = record.value
            if value == b"{not json":
                continue  # the one record a client that is not ours wrote without them
            headers = dict(record.headers)
            assert headers["ce_specversion"] == b"1.0", topic
            assert headers["ce_type"] == headers["dpm-schema"], topic
            assert headers["content-type"] == b"application/json", topic
            assert headers["ce_time"].endswith(b"Z"), topic
            body = orjson.loads(value or b"{}")
            assert headers["dpm-schema"].decode() == body["schema"], topic  # routable without parsing
            if "tenant" in body:
                assert headers["dpm-tenant"].decode() == body["tenant"] == case.ref.tenant
            unique = (headers["ce_source"], headers["ce_id"])
            assert unique not in seen, unique  # CloudEvents: source + id identify one event
            seen.add(unique)
            if headers["ce_source"].startswith((b"/dpm/projection/", b"/dpm/summ-only/")):
                assert headers["traceparent"] == TRACEPARENT, topic  # tracing off: the caller's trace, as it came
