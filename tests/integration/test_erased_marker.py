"""Erasure outlives its tombstone: the erased marker, kept by compaction, is what a process started later reads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.client import CaseErasedError, DecisionMemory
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.keytopic.keystore import KafkaKeyTopic
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.keys.store import CaseKeys
from pipeline.wire.key import KeyErased, decode_key_value
from tests.integration.test_client_appends import case_log, client_settings
from tests.pipeline_support import create_topics

pytestmark = pytest.mark.integration


def test_a_new_client_refuses_a_case_whose_key_topic_holds_only_its_erased_marker(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    """The key topic as compaction leaves it after DPM_TOMBSTONE_RETENTION_MS: no key, no tombstone, the marker."""
    create_topics(kafka_config, topic_names)
    gone = CaseRef("acme", "gone")
    topic = KafkaKeyTopic(kafka_config, topic_names.keys)
    topic.publish([(gone, KeyErased(gone, int(time.time() * 1000)))])
    topic.close()
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as fresh:
        with pytest.raises(CaseErasedError):
            fresh.append("gone", kind="document", text="the subject came back")
        assert fresh.append("kept", kind="document", text="another case").seq == 1
    case_keys.sync()
    assert case_keys.erased(gone)
    assert case_log(kafka_config, topic_names, gone, case_keys) == []


def test_an_erasure_leaves_the_marker_as_the_case_s_latest_key_record_and_no_key_material(
    kafka_bootstrap: str, kafka_config: dict[str, str], topic_names: TopicNames, tmp_path: Path, case_keys: CaseKeys
) -> None:
    create_topics(kafka_config, topic_names)
    settings = client_settings(kafka_bootstrap, topic_names, tmp_path)
    with DecisionMemory("acme", settings=settings) as memory:
        memory.append("gone", kind="document", text="Applicant income verified: 84,000")
    gone = CaseRef("acme", "gone")
    assert case_keys.erase_case(gone)
    values = [r.value for r in read_topic(kafka_config, topic_names.keys) if r.key == gone.key.encode()]
    assert len(values) == 3  # the wrapped key, its tombstone, the marker: compaction keeps the last only
    assert values[1] is None
    marker = decode_key_value(values[2])
    assert isinstance(marker, KeyErased)
    assert marker.case == gone
    with DecisionMemory("acme", settings=settings) as fresh, pytest.raises(CaseErasedError):
        fresh.append("gone", kind="document", text="the subject came back")
