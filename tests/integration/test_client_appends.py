"""The client library's appends on a real broker: the library numbers events, one writer per case, all or nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from pipeline.client import (
    ClusterUnavailableError,
    DecisionMemory,
    IdempotencyKeyReusedError,
    InvalidIdempotencyKeyError,
    NoEventsError,
    SeqMismatchError,
    TopicsMissingError,
)
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.keys.store import CaseKeys
from pipeline.wire.event import EventRecord
from pipeline.wire.sealing import open_body
from tests.pipeline_support import create_topics

pytestmark = pytest.mark.integration


def client_settings(bootstrap: str, names: TopicNames, home: Path) -> Settings:
    """The settings a test's clients connect with: its broker, its topics, the session's key folder."""
    return Settings.from_env({"DPM_BOOTSTRAP": bootstrap, "DPM_TOPIC_PREFIX": names.prefix, "DPM_HOME": str(home),
                              "DPM_KEYS_DIR": os.environ["DPM_KEYS_DIR"]})  # fmt: skip


def case_log(config: dict[str, str], names: TopicNames, case: CaseRef, keys: CaseKeys) -> list[tuple[int, str]]:
    """(seq, text) of the case's committed events in log order, opened with the case's key."""
    keys.sync()
    found = []
    for record in read_topic({**config, "isolation.level": "read_committed"}, names.events):
        if record.key and record.key.startswith(f"{case.key}/".encode()) and record.value:
            event = EventRecord.from_wire(open_body(orjson.loads(record.value), keys)).event
            found.append((event.seq, event.text))
    return found


def test_the_library_numbers_a_case_s_events_across_restarts_and_appends_a_batch_whole(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        first = memory.append("case-7", kind="document", text="Applicant income verified: 84,000")
        batch = memory.append_many("case-7", [("tool", "credit score 712"), ("message", "asked for a pay slip")])
        with pytest.raises(NoEventsError):
            memory.request("case-8", domain="loan")
    assert (first.seq, [b.seq for b in batch]) == (1, [2, 3])
    with DecisionMemory("acme", settings=settings) as restarted:  # a new process: it reads the case's last seq
        again = restarted.append("case-7", kind="message", text="pay slip received")
    assert again.seq == 4
    assert case_log(kafka_config, topic_names, CaseRef("acme", "case-7"), case_keys) == [
        (1, "Applicant income verified: 84,000"), (2, "credit score 712"), (3, "asked for a pay slip"),
        (4, "pay slip received")]  # fmt: skip


def test_two_processes_appending_to_one_case_alternately_hand_its_partition_over_without_a_conflict_or_a_fork(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """Two door replicas (each its own state, as on two hosts) fence each other's sequencer of the partition in turn."""
    create_topics(kafka_config, topic_names)
    one_settings = client_settings(kafka_bootstrap, topic_names, tmp_path / "one")
    two_settings = client_settings(kafka_bootstrap, topic_names, tmp_path / "two")
    written = []
    with DecisionMemory("acme", settings=one_settings) as one, DecisionMemory("acme", settings=two_settings) as two:
        for turn in range(10):
            writer = (one, two)[turn % 2]
            written.append(writer.append("case-1", kind="message", text=f"turn {turn}").seq)
    assert written == list(range(1, 11))
    assert case_log(kafka_config, topic_names, CaseRef("acme", "case-1"), case_keys) == [
        (n, f"turn {n - 1}") for n in range(1, 11)]  # fmt: skip


def test_an_append_retried_with_its_idempotency_key_is_written_once(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    steps = [("tool", "score 700"), ("tool", "income 50,000")]
    with DecisionMemory("acme", settings=settings) as memory:
        written = memory.append_many("case-2", steps, idempotency_key="step-41")
    with DecisionMemory("acme", settings=settings) as restarted:  # the retry comes from a restarted process
        retried = restarted.append_many("case-2", steps, idempotency_key="step-41")
        later = restarted.append("case-2", kind="message", text="next")
    assert retried == written
    assert later.seq == 3
    assert [seq for seq, _ in case_log(kafka_config, topic_names, CaseRef("acme", "case-2"), case_keys)] == [1, 2, 3]


def test_an_idempotency_key_reused_with_other_events_is_refused_and_writes_nothing(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    case = CaseRef("acme", "case-3")
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append("case-3", kind="tool", text="score 700", idempotency_key="step-1")
        with pytest.raises(IdempotencyKeyReusedError):  # same process: the writer's head knows the key's request
            memory.append("case-3", kind="tool", text="score 540", idempotency_key="step-1")
        with pytest.raises(IdempotencyKeyReusedError):  # a batch of the same first event and more is another request
            memory.append_many("case-3", [("tool", "score 700"), ("tool", "dti 51%")], idempotency_key="step-1")
    with DecisionMemory("acme", settings=settings) as restarted:  # a restarted process reads it from the log
        with pytest.raises(IdempotencyKeyReusedError):
            restarted.append("case-3", kind="tool", text="score 540", idempotency_key="step-1")
        again = restarted.append("case-3", kind="tool", text="score 700", idempotency_key="step-1")
    assert again.seq == 1
    assert case_log(kafka_config, topic_names, case, case_keys) == [(1, "score 700")]


@pytest.mark.parametrize("key", ["", " ", "a b", "x" * 201, "caf\u00e9", "tab\there"])
def test_an_idempotency_key_that_is_not_1_to_200_visible_ascii_characters_is_refused_before_anything_is_written(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys,
    key: str,
) -> None:  # fmt: skip
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        with pytest.raises(InvalidIdempotencyKeyError):
            memory.append("case-4", kind="tool", text="first", idempotency_key=key)
        memory.append("case-4", kind="tool", text="second")
        with pytest.raises(InvalidIdempotencyKeyError):
            memory.request("case-4", domain="loan", idempotency_key=key)
    assert case_log(kafka_config, topic_names, CaseRef("acme", "case-4"), case_keys) == [(1, "second")]


def test_a_decision_key_names_one_request_another_task_budget_or_architecture_with_it_is_refused(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append("case-5", kind="document", text="Applicant income verified: 84,000")
        first = memory.request("case-5", domain="loan", budget=2_000, idempotency_key="ask-1")
        assert memory.request("case-5", domain="loan", budget=2_000, idempotency_key="ask-1") == first
        for other in ({"domain": "claim", "budget": 2_000}, {"domain": "loan", "budget": 3_000},
                      {"domain": "loan", "budget": 2_000, "architecture": "summ"}):  # fmt: skip
            with pytest.raises(IdempotencyKeyReusedError):
                memory.request("case-5", idempotency_key="ask-1", **other)  # type: ignore[arg-type]
    with DecisionMemory("acme", settings=settings) as restarted:  # read from the triggers topic, not remembered
        with pytest.raises(IdempotencyKeyReusedError):
            restarted.request("case-5", domain="claim", budget=2_000, idempotency_key="ask-1")
        assert restarted.request("case-5", domain="loan", budget=2_000, idempotency_key="ask-1") == first
    triggers = [r for r in read_topic(kafka_config, topic_names.triggers) if r.value]
    assert len(triggers) == 1


_HALF_WRITTEN = """
import os, sys
from confluent_kafka import Producer
bootstrap, topic, writer_id, key = sys.argv[1:5]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": writer_id})
producer.init_transactions(30)
producer.begin_transaction()
for seq in (2, 3):  # two events of a batch, sent and flushed, never committed
    producer.produce(topic, key=f"{key}/{seq:08d}".encode(), value=b'{"half": "written"}', partition=int(sys.argv[5]))
producer.flush(30)
os._exit(9)  # killed mid-request: the transaction stays open
"""


def test_a_writer_killed_mid_batch_leaves_nothing_of_it_and_the_next_writer_continues_after_the_last_committed(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    case = CaseRef("acme", "case-3")
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append("case-3", kind="message", text="committed")
    partition = case_partition(case, 3)
    arguments = [kafka_bootstrap, topic_names.events, topic_names.sequencer_id(partition), case.key, str(partition)]
    killed = subprocess.run([sys.executable, "-c", _HALF_WRITTEN, *arguments], check=False, timeout=120)
    assert killed.returncode == 9
    with DecisionMemory("acme", settings=settings) as memory:  # registering aborts what the killed writer left open
        after = memory.append("case-3", kind="message", text="after the kill")
    assert after.seq == 2
    assert case_log(kafka_config, topic_names, case, case_keys) == [(1, "committed"), (2, "after the kill")]


def test_a_client_without_its_topics_says_which_are_missing_and_the_command_that_makes_them(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)  # no topics created under this prefix
    with pytest.raises(TopicsMissingError) as missing:
        DecisionMemory("acme", settings=settings)
    assert topic_names.events in str(missing.value)
    assert "dpm topics create" in str(missing.value)


def test_a_client_with_no_broker_says_so_within_its_connect_timeout_and_names_the_fix(
    topic_names: TopicNames, tmp_path: Path
) -> None:
    with socket.socket() as unused:  # a loopback port nobody listens on
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    settings = client_settings(address, topic_names, tmp_path)
    started = time.monotonic()
    with pytest.raises(ClusterUnavailableError) as unavailable:
        DecisionMemory("acme", settings=settings, connect_timeout=2)
    assert time.monotonic() - started < 10
    assert address in str(unavailable.value)
    assert "dpm broker up" in str(unavailable.value)


def test_a_decision_key_another_process_used_is_known_to_a_writer_of_the_case(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    """A replica's writer does not see triggers another replica sent under a key: it reads them before sending."""
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as writer, DecisionMemory("acme", settings=settings) as other:
        writer.append("case-6", kind="document", text="Applicant income verified: 84,000")
        first = other.request("case-6", domain="loan", budget=2_000, idempotency_key="ask-6")
        with pytest.raises(IdempotencyKeyReusedError):
            writer.request("case-6", domain="claim", budget=2_000, idempotency_key="ask-6")
        assert writer.request("case-6", domain="loan", budget=2_000, idempotency_key="ask-6") == first
    triggers = [r for r in read_topic(kafka_config, topic_names.triggers) if r.value]
    assert len(triggers) == 1


def test_an_append_expecting_another_last_seq_writes_nothing_and_a_keyed_retry_gets_its_first_answer(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """KurrentDB's expected revision: two agents on one case cannot both append after the seq they saw."""
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    case = CaseRef("acme", "case-9")
    with DecisionMemory("acme", settings=settings) as memory:
        first = memory.append("case-9", kind="tool", text="score 700", expected_seq=0, idempotency_key="s-1")
        with pytest.raises(SeqMismatchError) as moved:  # the other agent saw the case empty too
            memory.append("case-9", kind="tool", text="score 540", expected_seq=0)
        assert moved.value.current_seq == 1
        again = memory.append("case-9", kind="tool", text="score 700", expected_seq=0, idempotency_key="s-1")
        assert again == first  # the stored answer, before the seq is compared
    with DecisionMemory("acme", settings=settings) as restarted:  # a new process reads the head from the log
        with pytest.raises(SeqMismatchError):
            restarted.append("case-9", kind="tool", text="income 50,000", expected_seq=0)
        second = restarted.append("case-9", kind="tool", text="income 50,000", expected_seq=1)
    assert second.seq == 2
    assert case_log(kafka_config, topic_names, case, case_keys) == [(1, "score 700"), (2, "income 50,000")]
