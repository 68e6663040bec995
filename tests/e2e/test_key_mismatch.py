"""Records whose key and value disagree: refused as key-mismatch by every consumer, and erased with their case."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Message, Producer

from pipeline.core.events import CaseRef, Event, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.producer import EventProducer
from pipeline.keys.store import CaseKeys
from pipeline.services.cluster import pipeline_processes
from pipeline.services.erase import records_of
from pipeline.services.read_outputs import await_decisions
from pipeline.wire.event import CaseOpening, EventRecord
from pipeline.wire.record_keys import names_case
from pipeline.wire.trigger import DecisionId, DecisionRequest
from tests.pipeline_support import create_topics, small_cases, worker_env
from tests.processes import dpm_cli

# What this proves is our consumers' checks of a record's key against its value,
# which no broker release changes: `make test-kafka4` leaves it out.
pytestmark = pytest.mark.any_broker

BUDGET = 900
PARTITIONS = 3


def _raw(config: dict[str, str], topic: str, key: str, value: bytes, partition: int) -> LogPosition:
    """A record as a careless or hostile client writes it: key, value and partition as given, unchecked."""
    producer = Producer(config)
    written: list[LogPosition] = []

    def delivered(_error: object, msg: Message) -> None:
        written.append(LogPosition(msg.partition() or 0, msg.offset() or 0))

    producer.produce(topic, key=key.encode(), value=value, partition=partition, on_delivery=delivered)
    producer.flush(10)
    return written[0]


def _letters(config: dict[str, str], names: TopicNames, count: int) -> list[dict[str, str]]:
    deadline = time.monotonic() + 90
    letters: list[dict[str, str]] = []
    while len(letters) < count and time.monotonic() < deadline:
        letters = [orjson.loads(r.value or b"") for r in read_topic(config, names.dlq)]
        time.sleep(0.5)
    return letters


def test_each_kind_of_mismatch_is_refused_by_every_consumer_and_erased_with_the_case_it_names(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names, partitions=PARTITIONS)
    x, y = small_cases(per_domain=1)[:2]
    producer = EventProducer(kafka_config, topic_names, case_keys)
    positions = {c.ref: tuple(producer.append(c.trajectory.events, CaseOpening(c.task, (BUDGET,)))) for c in (x, y)}

    def event_of_y(seq: int) -> bytes:
        return EventRecord(Event(y.ref, seq, "note", "MISMATCH-MARKER: the applicant's income is $1")).encode()

    events = topic_names.events
    acme = CaseRef("acme", y.ref.case_id)
    kinds = {  # the key names one thing, the value another
        "case": _raw(kafka_config, events, f"{x.ref.key}/00000777", event_of_y(777), case_partition(x.ref, 3)),
        "tenant": _raw(kafka_config, events, f"{acme.key}/00000888", event_of_y(888), case_partition(acme, 3)),
        "seq": _raw(kafka_config, events, f"{y.ref.key}/00000555", event_of_y(556), case_partition(y.ref, 3)),
    }
    both = (Architecture.DPM, Architecture.SUMM)
    honest = DecisionRequest("honest", y.ref, y.task, BUDGET, both, positions[y.ref], len(positions[y.ref]))
    # A trigger for Y that names the mismatched record in place of Y's event 7, and one filed under X.
    swapped = (*positions[y.ref][:6], kinds["case"], *positions[y.ref][7:])
    smuggled = DecisionRequest("smuggled", y.ref, y.task, BUDGET, (Architecture.DPM,), swapped, len(swapped))
    producer.triggers([honest, smuggled])
    misfiled = DecisionRequest("misfiled", y.ref, y.task, BUDGET, both, positions[y.ref], len(positions[y.ref]))
    _raw(kafka_config, topic_names.triggers, x.ref.key, misfiled.encode(), case_partition(x.ref, 3))
    producer.close()
    members = [["worker"], *[["baseline", "--budgets", str(BUDGET)]] * 2]  # two baseline members, any ownership
    with pipeline_processes(members, worker_env(kafka_bootstrap, topic_names, tmp_path), tmp_path / "logs"):
        outputs = await_decisions(kafka_config, topic_names, 2, timeout_s=180, cipher=case_keys)
        letters = _letters(kafka_config, topic_names, 5)
    assert outputs.decision_ids() == {DecisionId("honest", a) for a in both}
    dpm, summ = (outputs.decisions[honest.decision_key(a)] for a in both)
    assert summ.events_sha256 == dpm.events_sha256  # Summ-only folded Y's own events, its event 7 included
    refused = sorted((letter["reason"], letter["source_topic"].rsplit(".", 1)[1]) for letter in letters)
    assert refused == [("key-mismatch", "events")] * 3 + [("key-mismatch", "triggers")] * 2, letters
    refused_triggers = {orjson.loads(base64.b64decode(letter["original_value_b64"]))["trigger_id"]
                        for letter in letters if letter["source_topic"] == topic_names.triggers}  # fmt: skip
    assert refused_triggers == {"smuggled", "misfiled"}

    env = {"DPM_BOOTSTRAP": kafka_bootstrap, "DPM_TOPIC_PREFIX": topic_names.prefix}
    erased = dpm_cli("erase", "--tenant", y.ref.tenant, "--case", y.ref.case_id, env=env)
    assert erased.returncode == 0, erased.stderr
    # Y's own events and the three records whose values name Y, wherever they were filed.
    assert f"{len(y.trajectory) + 3} event tombstone(s) and 0 segment view tombstone(s) written" in erased.stdout
    assert records_of(kafka_config, events, lambda k, v: names_case(k, v, y.ref)) == []
    assert records_of(kafka_config, events, lambda k, v: names_case(k, v, x.ref))  # X untouched
