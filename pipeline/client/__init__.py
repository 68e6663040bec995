"""The client library: a tenant's agents append a case's steps and get decisions back (docs/how-to/client.md).

from pipeline.client import DecisionMemory
with DecisionMemory(tenant="acme") as memory:
memory.append("case-7", kind="document", text="Applicant income verified: 84,000")
decision = memory.decide("case-7", domain="loan")
"""

from pipeline.client.aio import AsyncDecisionMemory
from pipeline.client.errors import (
    CaseErasedError,
    ClientError,
    ClusterUnavailableError,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    EventTooLargeError,
    IdempotencyKeyInFlightError,
    IdempotencyKeyReusedError,
    NoEventsError,
    NotAdverseError,
    ReasonsUnavailableError,
    SeqMismatchError,
    TopicsMissingError,
    TopicsRefusedError,
    UnknownCursorError,
)
from pipeline.client.memory import DEFAULT_BUDGET_CHARS, DecisionMemory
from pipeline.client.results import CitedEvent, Contest, Decision, EventPosition, Explanation, Fact, ModelUsage
from pipeline.core.idempotency import InvalidIdempotencyKeyError
from pipeline.keys.providers import KeyRevokedError, KeyServiceError, KeyServiceUnavailableError

__all__ = [
    "DEFAULT_BUDGET_CHARS",
    "AsyncDecisionMemory",
    "CaseErasedError",
    "CitedEvent",
    "ClientError",
    "ClusterUnavailableError",
    "Contest",
    "Decision",
    "DecisionMemory",
    "DecisionNotFoundError",
    "DecisionRefusedError",
    "DecisionTimeoutError",
    "EventPosition",
    "EventTooLargeError",
    "Explanation",
    "Fact",
    "IdempotencyKeyInFlightError",
    "IdempotencyKeyReusedError",
    "InvalidIdempotencyKeyError",
    "KeyRevokedError",
    "KeyServiceError",
    "KeyServiceUnavailableError",
    "ModelUsage",
    "NoEventsError",
    "NotAdverseError",
    "ReasonsUnavailableError",
    "SeqMismatchError",
    "TopicsMissingError",
    "TopicsRefusedError",
    "UnknownCursorError",
]
