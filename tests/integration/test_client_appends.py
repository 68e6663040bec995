"""The client library's appends on a real broker: the library numbers events, one writer per case, all or nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pipeline.client import CaseConflictError, DecisionMemory, NoEventsError
from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.kafka.partitioning import case_partition
from pipeline.kafka.range_reads import read_topic
from pipeline.kafka.topics import TopicNames
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


def test_a_second_writer_fences_the_first_which_learns_it_and_nothing_is_duplicated_or_skipped(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as one, DecisionMemory("acme", settings=settings) as two:
        one.append("case-1", kind="message", text="one: first")
        two.append("case-1", kind="message", text="two: takes over")  # registers the case: `one` is fenced
        with pytest.raises(CaseConflictError, match="another writer took it over"):
            one.append("case-1", kind="message", text="one: refused, never written")
        taken_back = one.append("case-1", kind="message", text="one: after two's event")
        assert taken_back.seq == 3
    assert case_log(kafka_config, topic_names, CaseRef("acme", "case-1"), case_keys) == [
        (1, "one: first"), (2, "two: takes over"), (3, "one: after two's event")]  # fmt: skip


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
    arguments = [kafka_bootstrap, topic_names.events, topic_names.writer_id(case.key), case.key, str(partition)]
    killed = subprocess.run([sys.executable, "-c", _HALF_WRITTEN, *arguments], check=False, timeout=120)
    assert killed.returncode == 9
    with DecisionMemory("acme", settings=settings) as memory:  # registering aborts what the killed writer left open
        after = memory.append("case-3", kind="message", text="after the kill")
    assert after.seq == 2
    assert case_log(kafka_config, topic_names, case, case_keys) == [(1, "committed"), (2, "after the kill")]
