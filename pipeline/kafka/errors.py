"""Errors of the Kafka adapters; third-party Kafka errors are wrapped into these."""

from confluent_kafka import KafkaError, KafkaException

from pipeline.core.errors import DpmError

# librdkafka's codes for a cluster that did not answer, or is not ready yet (a broker just back has
# no partition leaders for a few seconds), as opposed to one that answered no
_NO_ANSWER = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)  # fmt: skip


class KafkaAdapterError(DpmError):
    """A Kafka operation failed; the message says which and why."""


class BrokerUnavailableError(KafkaAdapterError):
    """No broker answered in time (a metadata request, or a write retried until its deadline)."""


class TopicConflictError(KafkaAdapterError):
    """An existing topic's settings differ from what the pipeline needs."""


class LocalBrokerError(KafkaAdapterError):
    """The project's own local broker could not be fetched, started or stopped."""


class NotAuthorizedError(KafkaAdapterError):
    """The cluster refused the principal of DPM_KAFKA_CONFIG an operation its ACLs do not allow."""


def wrapped(exc: KafkaException, message: str) -> KafkaAdapterError:
    """A librdkafka failure as ours: BrokerUnavailableError when the cluster did not answer or was not ready."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    away = error is not None and (error.retriable() or error.code() in _NO_ANSWER)
    return (BrokerUnavailableError if away else KafkaAdapterError)(f"{message}: {error.str() if error else exc}")
