"""The lookup index against the real broker: incremental, committed-only, durable, and rebuilt when corrupt."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading import output_index
from pipeline.kafka.reading.index_store import place, unplace
from pipeline.kafka.reading.output_index import OutputIndex
from pipeline.kafka.reading.places import PlaceReader
from pipeline.wire.headers import TENANT_HEADER
from tests.pipeline_support import create_topics

pytestmark = pytest.mark.integration


def _publish(producer: Producer, names: TopicNames, decision_id: str, *, tenant: str = "acme",
             case_id: str = "c1", calls: int = 2) -> None:  # fmt: skip
    """A decision's records as a worker writes them: keyed by id, the tenant in a header, in clear."""
    key = decision_id.encode()
    headers: list[tuple[str, str | bytes | None]] = [(TENANT_HEADER, tenant.encode())]
    clear = {"decision_id": decision_id, "tenant": tenant, "case_id": case_id}
    producer.produce(names.views, key=key, value=orjson.dumps({**clear, "view": {}}), headers=headers)
    decision = {**clear, "decision": {"label": "APPROVE"}}
    producer.produce(names.decisions, key=key, value=orjson.dumps(decision), headers=headers)
    for n in range(calls):
        producer.produce(names.audit, key=key, value=orjson.dumps({**clear, "call_index": n}),
                         headers=[*headers, ("ce_id", f"{decision_id}/audit/{n}".encode())])  # fmt: skip


def _transactional(config: dict[str, str]) -> Producer:
    producer = Producer({**config, "transactional.id": f"index-test-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def test_a_restarted_index_reads_only_what_was_published_since(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=2)
    producer = _transactional(kafka_config)
    producer.begin_transaction()
    for n in range(10):
        _publish(producer, topic_names, f"t{n}:dpm")
    producer.commit_transaction(30)

    first = OutputIndex(kafka_config, topic_names, tmp_path)
    assert first.catch_up().decisions == 10
    [entry] = first.entries("t3:dpm", "acme")
    assert entry.complete
    assert (entry.label, len(entry.audits)) == ("APPROVE", 2)
    records = first.read([(topic_names.decisions, entry.decision or 0), (topic_names.views, entry.view or 0)])
    assert {orjson.loads(r.value or b"")["decision_id"] for r in records.values()} == {"t3:dpm"}
    assert first.entries("t3:dpm", "globex") == []  # another tenant's lookup finds nothing
    first.close()

    producer.begin_transaction()
    _publish(producer, topic_names, "t10:dpm", case_id="c2")
    producer.commit_transaction(30)
    again = OutputIndex(kafka_config, topic_names, tmp_path)  # a fresh process on the same host
    assert again.entries("t3:dpm", "acme")[0].decision == entry.decision  # found without reading anything
    caught = again.catch_up()
    assert caught.decisions == 1
    assert caught.records <= 4 + 3  # the one decision's records (and transaction markers' neighbours), not all
    assert [e.decision_id for e in again.store.of_case("acme", "c2") or []] == ["t10:dpm"]
    again.close()


def test_a_decision_of_an_open_transaction_waits_and_its_records_come_together(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    producer = _transactional(kafka_config)
    producer.begin_transaction()
    _publish(producer, topic_names, "open:dpm")
    producer.flush(10)
    index = OutputIndex(kafka_config, topic_names, tmp_path)
    assert index.entries("open:dpm", "acme") == []  # not committed: not indexed
    producer.commit_transaction(30)
    for _ in range(50):
        if index.entries("open:dpm", "acme"):
            break
    [entry] = index.entries("open:dpm", "acme")
    assert entry.complete
    assert len(entry.audits) == 2
    index.close()


def test_a_corrupt_index_file_is_set_aside_and_rebuilt(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    producer = _transactional(kafka_config)
    producer.begin_transaction()
    _publish(producer, topic_names, "t1:dpm")
    producer.commit_transaction(30)
    index = OutputIndex(kafka_config, topic_names, tmp_path)
    index.catch_up()
    path = index.store.path
    index.close()
    for leftover in tmp_path.glob("*-wal"):
        leftover.unlink()
    path.write_bytes(b"this is not a database" * 100)

    rebuilt = OutputIndex(kafka_config, topic_names, tmp_path)
    assert "it is rebuilt from its topics" in caplog.text
    [entry] = rebuilt.entries("t1:dpm", "acme")  # read again from the topics on the miss
    assert unplace(entry.decision or 0)[0] == 0
    assert entry.complete
    assert Path(f"{path}.corrupt").exists()
    rebuilt.close()


def test_an_index_stopped_mid_catch_up_goes_on_where_it_stopped_with_no_entry_twice_or_missing(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topics(kafka_config, topic_names, partitions=2)
    producer = _transactional(kafka_config)
    producer.begin_transaction()
    for n in range(60):
        _publish(producer, topic_names, f"t{n}:dpm", case_id=f"c{n % 7}")
    producer.commit_transaction(30)
    monkeypatch.setattr(output_index, "_CHUNK", 25)  # many SQLite transactions in one catch-up
    index = OutputIndex(kafka_config, topic_names, tmp_path)
    applied = 0
    real_apply = index.store.apply

    def killed_after_three(*args: Any) -> None:  # the process dies before its fourth transaction
        nonlocal applied
        applied += 1
        if applied > 3:
            raise KeyboardInterrupt
        real_apply(*args)

    monkeypatch.setattr(index.store, "apply", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        index.catch_up()
    index.close()

    restarted = OutputIndex(kafka_config, topic_names, tmp_path)
    caught = restarted.catch_up()
    assert caught.records < 4 * 60  # went on from the stored offsets, not from the start
    found = [e for n in range(7) for e in restarted.store.of_case("acme", f"c{n}") or []]
    assert sorted(e.decision_id for e in found) == sorted(f"t{n}:dpm" for n in range(60))  # each once
    assert all(e.complete and len(e.audits) == 2 for e in found)
    restarted.close()


def test_places_far_apart_are_sought_and_a_place_past_the_end_is_missing_not_waited_for(
    kafka_config: dict[str, str], topic_names: TopicNames
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    plain = Producer(kafka_config)
    for n in range(1_000):
        plain.produce(topic_names.views, key=b"k", value=str(n).encode(), partition=0)
    plain.flush(30)
    reader = PlaceReader(kafka_config)
    wanted = [(topic_names.views, place(0, offset)) for offset in (3, 4, 600, 999, 1_005)]
    found = reader.read(wanted)
    assert {unplace(where)[1]: raw.value for (_, where), raw in found.items()} == {3: b"3", 4: b"4", 600: b"600",
                                                                                  999: b"999"}  # fmt: skip
    assert reader.read([(topic_names.views, place(0, 10))])[(topic_names.views, place(0, 10))].value == b"10"
    reader.close()


class _Told:
    """A catch-up report that keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def begun(self, backlog: int, path: Path) -> None:
        self.calls.append(("begun", backlog))

    def advanced(self, done: int) -> None:
        self.calls.append(("advanced", done))

    def ended(self) -> None:
        self.calls.append(("ended", 0))


def test_a_catch_up_reports_its_backlog_and_reads_all_of_it(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    """What a command's progress bar shows: the offsets to read first, then how many are read, to the last."""
    create_topics(kafka_config, topic_names, partitions=2)
    producer = _transactional(kafka_config)
    producer.begin_transaction()
    for n in range(30):
        _publish(producer, topic_names, f"p{n}:dpm")
    producer.commit_transaction(30)
    told = _Told()
    index = OutputIndex(kafka_config, topic_names, tmp_path, report=told)
    index.catch_up()
    (first, backlog), *advances, last = told.calls
    assert first == "begun"
    # 30 views, 30 decisions, 60 audit records, and one commit marker per partition written
    assert 120 < backlog <= 120 + 3 * 2
    assert [what for what, _ in advances] == ["advanced"] * len(advances)
    assert [done for _, done in advances] == sorted(done for _, done in advances)  # never goes back
    assert advances[-1][1] == backlog  # read to the ends it announced
    assert last == ("ended", 0)

    told.calls.clear()
    index.catch_up()  # nothing new: a backlog of none, still begun and ended
    assert told.calls[0] == ("begun", 0)
    assert told.calls[-1] == ("ended", 0)
    index.close()


_CATCH_UP_CHILD = """
import sys
from pathlib import Path

import orjson

from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.reading import output_index

output_index._CHUNK = 50  # many SQLite transactions, so the two processes' writes interleave
index = output_index.OutputIndex(orjson.loads(sys.argv[1]), TopicNames(sys.argv[2]), Path(sys.argv[3]))
print("ready", flush=True)
sys.stdin.readline()  # both processes begin at once
print(index.catch_up().records)
index.close()
"""


def test_two_processes_catching_up_one_file_at_once_merge_as_one(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    """Two commands on one DPM_HOME index the same topics at the same moment: every decision once, all complete."""
    create_topics(kafka_config, topic_names, partitions=2)
    producer = _transactional(kafka_config)
    for batch in range(4):
        producer.begin_transaction()
        for n in range(batch * 100, batch * 100 + 100):
            _publish(producer, topic_names, f"t{n}:dpm", case_id=f"c{n % 7}")
        producer.commit_transaction(30)
    argv = [sys.executable, "-c", _CATCH_UP_CHILD, orjson.dumps(kafka_config).decode(), topic_names.prefix,
            str(tmp_path)]  # fmt: skip
    children = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]  # fmt: skip
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    for child in children:  # both told before either is waited for
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outcomes = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err[-2000:] for _, err in outcomes]
    read = [int(out) for out, _ in outcomes]
    assert all(n > 0 for n in read), read  # both read (neither found the work done before it began)

    index = OutputIndex(kafka_config, topic_names, tmp_path)
    assert index.catch_up().records == 0  # the offsets the two stored reach the ends: nothing left
    found = [e for n in range(7) for e in index.store.of_case("acme", f"c{n}") or []]
    assert sorted(e.decision_id for e in found) == sorted(f"t{n}:dpm" for n in range(400))  # each once
    assert all(e.complete and len(e.audits) == 2 for e in found)
    index.close()
