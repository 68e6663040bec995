"""Kafka adapters: the only package that imports confluent_kafka (import-linter checks it).

By role, one folder each: `writing` (the case writers, the trigger sender, the transactional
producer), `reading` (a case's events by offset, whole topics, followers, replies), `processing`
(the workers' exactly-once loop), `cluster` (metadata, topics, layout and generations, ACLs and
principals), `keytopic` (data keys and erasures), `local` (the KRaft broker run from Maven jars).
"""

from pipeline.kafka.cluster.admin import ClusterInfo, admin_client, fetch_metadata, topic_partitions
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.cluster.topics import TopicNames, TopicSpec, create_pipeline_topics, ensure_topics, pipeline_topics
from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, LocalBrokerError, TopicConflictError
from pipeline.kafka.processing.steps import Handler, Output
from pipeline.kafka.processing.transactions import LoopConfig, TransactionalLoop
from pipeline.kafka.reading.range_reads import read_range, read_topic
from pipeline.kafka.reading.reader import KafkaEventLog
from pipeline.kafka.writing.producer import EventProducer

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
