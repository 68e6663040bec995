"""Keys by case: a reader opens a case's records with that case's key alone, and erasure and rotation reach it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.settings import keys_folder
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import IndexedKeyTopic
from pipeline.keys.providers import LocalFileKeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys
from pipeline.wire.sealing import CaseErasedError
from tests.pipeline_support import create_topics

pytestmark = pytest.mark.integration


def _reader(config: dict[str, str], names: TopicNames, keks: Path, index: Path) -> tuple[CaseKeys, IndexedKeyTopic]:
    topic = IndexedKeyTopic(config, names.keys, index)
    return CaseKeys(KeyRing(LocalFileKeyProvider(keks)), topic), topic


def test_a_fresh_reader_loads_the_cases_it_opens_and_learns_erasure_and_rotation(
    kafka_config: dict[str, str],
    topic_names: TopicNames,
    case_keys: CaseKeys,
    tmp_path: Path,
    keys_dir: Path,
) -> None:
    create_topics(kafka_config, topic_names)
    cases = [CaseRef("acme", f"case-{n}") for n in range(40)]
    sealed = {case: case_keys.seal(case, f"income of {case.case_id}".encode(), b"aad") for case in cases}
    keks = keys_folder(keys_dir, topic_names.prefix)  # the folder `case_keys` wraps with
    first, first_topic = _reader(kafka_config, topic_names, keks, tmp_path / "index")
    assert first.open(cases[7], sealed[cases[7]], b"aad") == b"income of case-7"
    assert set(first_topic._loaded) == {cases[7]}  # one case's key applied, not forty

    second, second_topic = _reader(kafka_config, topic_names, keks, tmp_path / "index")  # a process started later
    assert second.open(cases[3], sealed[cases[3]], b"aad") == b"income of case-3"
    assert second.open(cases[7], sealed[cases[7]], b"aad") == b"income of case-7"
    assert set(second_topic._loaded) == {cases[3], cases[7]}

    assert case_keys.erase_case(cases[7])
    second.sync()  # the erasure reaches a case it loaded
    with pytest.raises(CaseErasedError):
        second.open(cases[7], sealed[cases[7]], b"aad")
    assert second.erased(cases[7])
    first.sync()  # another process indexed the erasure already: this one learns it from the shared file
    with pytest.raises(CaseErasedError):
        first.open(cases[7], sealed[cases[7]], b"aad")

    rotation = case_keys.rotate("acme")
    assert rotation.rewrapped == len(cases) - 1
    second.sync()
    assert second.open(cases[3], sealed[cases[3]], b"aad") == b"income of case-3"  # rewrapped, reloaded
    first.close()
    second.close()


def test_a_reader_s_new_case_key_comes_with_its_next_sync(
    kafka_config: dict[str, str],
    topic_names: TopicNames,
    case_keys: CaseKeys,
    tmp_path: Path,
    keys_dir: Path,
) -> None:
    create_topics(kafka_config, topic_names)
    keks = keys_folder(keys_dir, topic_names.prefix)  # the folder `case_keys` wraps with
    reader, _ = _reader(kafka_config, topic_names, keks, tmp_path / "index")
    reader.sync()
    late = CaseRef("acme", "late")
    sealed = case_keys.seal(late, b"a late case", b"")  # keyed after the reader's index was brought up to date
    assert reader.open(late, sealed, b"") == b"a late case"
    assert not reader.erased(CaseRef("acme", "never-written"))
    reader.close()


def test_a_reader_whose_places_file_is_current_asks_the_topic_its_ends_and_nothing_more(
    kafka_config: dict[str, str],
    topic_names: TopicNames,
    case_keys: CaseKeys,
    tmp_path: Path,
    keys_dir: Path,
) -> None:
    """What a fresh lookup on a host whose doors keep the file current costs: one ListOffsets, no follower."""
    create_topics(kafka_config, topic_names)
    case = CaseRef("acme", "current")
    sealed = case_keys.seal(case, b"kept current", b"")
    keks = keys_folder(keys_dir, topic_names.prefix)
    first, first_topic = _reader(kafka_config, topic_names, keks, tmp_path / "index")
    assert first.open(case, sealed, b"") == b"kept current"  # indexes the topic into the host's file
    assert _follower_connected(first_topic)
    later, later_topic = _reader(kafka_config, topic_names, keks, tmp_path / "index")
    assert later.open(case, sealed, b"") == b"kept current"
    assert not _follower_connected(later_topic)  # nothing new since the file's offsets: never connected
    assert case_keys.erase_case(case)  # and once something is new, it reads it
    later.sync()
    assert later.erased(case)
    assert _follower_connected(later_topic)
    first.close()
    later.close()


def _follower_connected(topic: IndexedKeyTopic) -> bool:
    return topic._follower._consumer is not None
