"""Errors of the Kafka adapters; third-party Kafka errors are wrapped into these."""

from pipeline.core.errors import DpmError


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
