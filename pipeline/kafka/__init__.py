"""Kafka adapters: the only package that imports confluent_kafka (import-linter checks it).

Event reads by offset, the producer, the exactly-once transactional loop, topic layout and
creation, cluster metadata, and the local KRaft broker run from Maven Central jars.
"""

from pipeline.kafka.admin import ClusterInfo, admin_client, fetch_metadata, topic_partitions
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, LocalBrokerError, TopicConflictError
from pipeline.kafka.partitioning import case_partition
from pipeline.kafka.producer import EventProducer
from pipeline.kafka.range_reads import read_range, read_topic
from pipeline.kafka.reader import KafkaEventLog
from pipeline.kafka.steps import Handler, Output
from pipeline.kafka.topics import TopicNames, TopicSpec, create_pipeline_topics, ensure_topics, pipeline_topics
from pipeline.kafka.transactions import LoopConfig, TransactionalLoop

__all__ = [
    "BrokerUnavailableError",
    "ClusterInfo",
    "EventProducer",
    "Handler",
    "KafkaAdapterError",
    "KafkaEventLog",
    "LocalBrokerError",
    "LoopConfig",
    "Output",
    "TopicConflictError",
    "TopicNames",
    "TopicSpec",
    "TransactionalLoop",
    "admin_client",
    "case_partition",
    "create_pipeline_topics",
    "ensure_topics",
    "fetch_metadata",
    "pipeline_topics",
    "read_range",
    "read_topic",
    "topic_partitions",
]
