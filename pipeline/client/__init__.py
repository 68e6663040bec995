"""The client library: a tenant's agents append a case's steps and get decisions back (docs/how-to/client.md).

from pipeline.client import DecisionMemory
with DecisionMemory(tenant="acme") as memory:
memory.append("case-7", kind="document", text="Applicant income verified: 84,000")
decision = memory.decide("case-7", domain="loan")
"""

from pipeline.client.aio import AsyncDecisionMemory
from pipeline.client.errors import (
    CaseConflictError,
    ClientError,
    ClusterUnavailableError,
    DecisionNotFoundError,
    DecisionRefusedError,
    DecisionTimeoutError,
    EventTooLargeError,
    NoEventsError,
    NotAdverseError,
    ReasonsUnavailableError,
)
from pipeline.client.memory import DEFAULT_BUDGET_CHARS, DecisionMemory
from pipeline.client.results import CitedEvent, Decision, EventPosition, Explanation, Fact, ModelUsage

__all__ = [
    "DEFAULT_BUDGET_CHARS",
    "AsyncDecisionMemory",
    "CaseConflictError",
    "CitedEvent",
    "ClientError",
    "ClusterUnavailableError",
    "Decision",
    "DecisionMemory",
    "DecisionNotFoundError",
    "DecisionRefusedError",
    "DecisionTimeoutError",
    "EventPosition",
    "EventTooLargeError",
    "Explanation",
    "Fact",
    "ModelUsage",
    "NoEventsError",
    "NotAdverseError",
    "ReasonsUnavailableError",
]
