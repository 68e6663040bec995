"""Group commit on a real broker: appends that arrive together share a transaction, each checked alone."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipeline.core.events import CaseRef, InvalidEventError, LogPosition
from pipeline.core.task import Architecture
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing import sequencer
from pipeline.kafka.writing.case_writer import CaseWriters
from pipeline.kafka.writing.head_store import HeadStore
from pipeline.kafka.writing.sequencer import Appended, GroupCommit, SeqMismatchError
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic
from pipeline.wire.door_checks import standing_task
from pipeline.wire.trigger import DecisionRequest
from tests.pipeline_support import create_topics

pytestmark = pytest.mark.integration


def _events_by_case(config: dict[str, str], names: TopicNames) -> dict[str, list[int]]:
    """Each case's seqs as committed, in log order."""
    found: dict[str, list[int]] = {}
    for record in read_topic({**config, "isolation.level": "read_committed"}, names.events):
        case, _, seq = (record.key or b"").decode().rpartition("/")
        found.setdefault(case, []).append(int(seq))
    return found


def test_appends_of_many_cases_at_once_share_transactions_and_every_case_is_numbered_1_to_n(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=2)
    writers = CaseWriters(kafka_config, topic_names, None, tmp_path, GroupCommit(linger_s=0.02, max_records=500))
    cases = [CaseRef("acme", f"case-{n}") for n in range(40)]
    errors: list[BaseException] = []

    def agent(case: CaseRef) -> None:
        try:
            for step in range(3):
                writers.append(case, [("tool", f"{case.case_id} step {step}")], batch_id=uuid.uuid4().hex,
                               fingerprint=None)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(case,)) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stats = writers.stats()
    writers.close()
    assert errors == []
    assert _events_by_case(kafka_config, topic_names) == {case.key: [1, 2, 3] for case in cases}
    assert stats.appends == 120
    assert stats.transactions < stats.appends / 2  # 40 agents at once: their appends were grouped


def test_a_sequencer_keeps_its_own_commits_without_reading_them_back(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    writers = CaseWriters(kafka_config, topic_names, None, tmp_path, GroupCommit(linger_s=0.0, max_records=500))
    case = CaseRef("acme", "one-after-another")
    for step in range(10):  # each its own transaction: the next follows the last one's commit marker
        writers.append(case, [("tool", f"step {step}")], batch_id=uuid.uuid4().hex, fingerprint=None)
    stats = writers.stats()
    writers.close()
    assert _events_by_case(kafka_config, topic_names) == {case.key: list(range(1, 11))}
    assert (stats.transactions, stats.events_read) == (10, 0)


def test_an_append_refused_in_a_group_fails_alone_and_its_neighbours_are_written(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    writers = CaseWriters(kafka_config, topic_names, None, tmp_path, GroupCommit(linger_s=0.2, max_records=500))
    case = CaseRef("acme", "case-1")
    writers.append(case, [("tool", "first")], batch_id="b0", fingerprint=None)
    outcomes: dict[str, Appended | BaseException] = {}

    def append(name: str, items: list[tuple[str, str]], expected: int | None) -> None:
        try:
            outcomes[name] = writers.append(CaseRef("acme", name if name != "stale" else "case-1"), items,
                                            batch_id=name, fingerprint=None, expected_seq=expected)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            outcomes[name] = exc

    calls = [("case-2", [("tool", "fine")], None), ("stale", [("tool", "refused")], 0),
             ("case-3", [("bad kind\u0001", "refused")], None), ("case-4", [("tool", "fine too")], None)]  # fmt: skip
    threads = [threading.Thread(target=append, args=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    stats = writers.stats()
    writers.close()
    assert isinstance(outcomes["stale"], SeqMismatchError)
    assert outcomes["stale"].current == 1
    assert isinstance(outcomes["case-3"], InvalidEventError)
    assert isinstance(outcomes["case-2"], Appended)
    assert isinstance(outcomes["case-4"], Appended)
    assert _events_by_case(kafka_config, topic_names) == {"acme/case-1": [1], "acme/case-2": [1], "acme/case-4": [1]}
    assert stats.transactions == 2  # the first append, then one for both that passed


def test_two_sequencers_sharing_one_head_store_alternate_on_a_case_without_a_gap_or_a_fork(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    """Two door processes of one host: one store file, each its own sequencer, fencing each other in turn."""
    create_topics(kafka_config, topic_names, partitions=1)
    one = CaseWriters({**kafka_config, "client.id": "door-1"}, topic_names, None, tmp_path)
    two = CaseWriters({**kafka_config, "client.id": "door-2"}, topic_names, None, tmp_path)
    case = CaseRef("acme", "case-1")
    seqs = [(one, two)[n % 2].append(case, [("tool", f"turn {n}")], batch_id=f"b{n}", fingerprint=None).first_seq
            for n in range(12)]  # fmt: skip
    retried = one.append(case, [("tool", "turn 11")], batch_id="b11", fingerprint=None)  # two wrote it: one knows
    known = two.known(case)
    one.close()
    two.close()
    assert seqs == list(range(1, 13))
    assert (retried.first_seq, retried.written) == (12, False)
    assert len(known.positions) == 12
    assert _events_by_case(kafka_config, topic_names) == {case.key: list(range(1, 13))}


class _KeysWithoutPrepare(CaseKeys):
    """Case keys whose key topic refuses a group's keys written together (a shortcut that may fail)."""

    def prepare(self, cases: Iterable[CaseRef]) -> None:
        raise KafkaAdapterError("the key topic refused the batch")


def test_new_cases_whose_keys_are_not_made_together_get_them_as_they_are_sealed(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path
) -> None:
    create_topics(kafka_config, topic_names, partitions=1)
    keys = _KeysWithoutPrepare(KeyRing(LocalFileKeyProvider(tmp_path / "keks")), MemoryKeyTopic())
    writers = CaseWriters(kafka_config, topic_names, keys, tmp_path, GroupCommit(linger_s=0.02, max_records=500))
    cases = [CaseRef("acme", f"new-{n}") for n in range(5)]
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(lambda case: writers.append(case, [("tool", "a step")], batch_id=uuid.uuid4().hex,
                                                  fingerprint=None), cases))  # fmt: skip
    writers.close()
    assert _events_by_case(kafka_config, topic_names) == {case.key: [1] for case in cases}
    assert all(keys.knows(case) for case in cases)


def test_a_read_without_requests_leaves_the_triggers_unread_and_a_read_with_them_finds_a_request(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request under a new trigger id needs the case's events only: its read folds no trigger and reads no row."""
    monkeypatch.setattr(sequencer, "_TRIGGERS_EVERY_S", 600.0)  # no fold of the requests but the ones asked for
    create_topics(kafka_config, topic_names, partitions=1)
    writers = CaseWriters(kafka_config, topic_names, None, tmp_path)
    case = CaseRef("acme", "asked")
    written = writers.append(case, [("tool", "step 1"), ("tool", "step 2")], batch_id="b1", fingerprint=None)
    assert writers.known(case).triggers == {}  # the requests folded: none yet
    writers.send_trigger(_request(case, written.positions)).result(30)
    without = writers.known(case, requests=False)
    after_without = HeadStore(_store_file(tmp_path)).next_offset(topic_names.triggers, 0)
    with_them = writers.known(case)
    writers.close()
    assert (without.positions, without.triggers) == (written.positions, {})
    assert after_without == 0  # the triggers partition was not folded for it
    assert with_them.positions == written.positions
    assert with_them.triggers["k-asked"].position.offset == 0


def test_a_sequencer_folds_the_requests_reads_left_when_it_idles(
    kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sequencer, "_TRIGGERS_EVERY_S", 0.2)
    create_topics(kafka_config, topic_names, partitions=1)
    writers = CaseWriters(kafka_config, topic_names, None, tmp_path)
    case = CaseRef("acme", "asked")
    written = writers.append(case, [("tool", "step 1")], batch_id="b1", fingerprint=None)
    writers.known(case)
    writers.send_trigger(_request(case, written.positions)).result(30)
    writers.known(case, requests=False)  # within the interval: the request is left unfolded, and the sequencer idles
    store = HeadStore(_store_file(tmp_path))
    deadline = time.monotonic() + 30
    while store.next_offset(topic_names.triggers, 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    writers.close()
    assert store.next_offset(topic_names.triggers, 0) > 0


def _request(case: CaseRef, positions: tuple[LogPosition, ...]) -> DecisionRequest:
    return DecisionRequest("k-asked", case, standing_task("loan"), 2_000, (Architecture.DPM,), positions,
                           len(positions))  # fmt: skip


def _store_file(state_dir: Path) -> Path:
    found = sorted((state_dir / "heads").glob("*.sqlite"))
    assert len(found) == 1, sorted(str(p) for p in state_dir.rglob("*"))
    return found[0]
