"""What the client library raises: each says what was and was not done, and what to do next."""

from __future__ import annotations

from pipeline.core.errors import DpmError
from pipeline.wire.rejection import RETRYABLE


class ClientError(DpmError):
    """A call of the client library failed; nothing half-done is left behind."""


class TopicsMissingError(ClientError):
    """The pipeline's topics do not exist on the cluster: `dpm topics create` (or `dpm tenants add`) makes them."""


class TopicsRefusedError(ClientError):
    """The cluster refuses this principal the tenant's topics: DPM_KAFKA_CONFIG names another tenant's, or no grant."""


class ClusterUnavailableError(ClientError):
    """The cluster did not answer within the time given: nothing of the call was written, unless the message says so.

    An append whose commit was sent and not confirmed may have been written: the message says so, and
    the same idempotency key never writes it twice.
    """


class EventTooLargeError(ClientError):
    """An event too large for one record (its text sealed, with its headers): nothing of the append was written.

    `index` is the event's place in the append (0-based), `size` and `limit` in bytes.
    """

    def __init__(self, message: str, *, index: int = 0, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.index, self.size, self.limit = index, size, limit


class NoEventsError(ClientError):
    """A decision was asked for a case that has no events."""


class NotAdverseError(ClientError):
    """Reasons were asked of a decision whose domain does not mark its label adverse: it owes none."""


class ReasonsUnavailableError(ClientError):
    """A decision's reasons cannot be found: its recorded events are no longer what it read (or the model failed)."""


class DecisionRefusedError(ClientError):
    """A worker refused the decision request: its dead letter's reason (a `Rejection` value) and detail.

    Made with `of`; the message alone is the constructor's argument, so the error pickles like every other.
    """

    def __init__(self, message: str, *, decision_id: str = "", reason: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.decision_id, self.reason, self.detail = decision_id, reason, detail

    @property
    def retryable(self) -> bool:
        """Whether the refusal binds nothing (the key service did not answer): the same request again is decided."""
        return self.reason in {reason.value for reason in RETRYABLE}

    @classmethod
    def of(cls, decision_id: str, reason: str, detail: str) -> DecisionRefusedError:
        return cls(f"decision {decision_id} refused ({reason}): {detail}", decision_id=decision_id, reason=reason,
                   detail=detail)  # fmt: skip


class DecisionTimeoutError(ClientError):
    """No decision within the time given; it may still come: collect it later with `decision(decision_id)`.

    `hint`, when not empty, says why it may not come (no worker of its architecture runs) and what to run.
    """

    def __init__(self, message: str, *, decision_id: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.decision_id, self.hint = decision_id, hint

    @classmethod
    def of(cls, decision_id: str, timeout_s: float) -> DecisionTimeoutError:
        return cls(f"no decision {decision_id} within {timeout_s:g} s; it may still come: collect it later with "
                   f"decision({decision_id!r})", decision_id=decision_id)  # fmt: skip


class DecisionNotFoundError(ClientError):
    """No decision with that id was published for this tenant (yet)."""


class UnknownCursorError(ClientError):
    """A page was asked for after a decision id that is none of the case's decisions: nothing to start after."""


class IdempotencyKeyReusedError(ClientError):
    """The idempotency key was used before with another request (other events, or another decision): nothing written.

    A key names one request: retry with the same request, or use a new key for a new one.
    """


class IdempotencyKeyInFlightError(ClientError):
    """A request with the same idempotency key is still being written by this client: nothing of this one was.

    Retry once the first has answered: the retry then gets the first request's answer.
    """


class SeqMismatchError(ClientError):
    """The case's last seq is not the one an append expected (`expected_seq`): nothing of it was written."""

    def __init__(self, message: str, *, current_seq: int = 0) -> None:
        super().__init__(message)
        self.current_seq = current_seq  # the case's last seq when the append was refused

    def __reduce__(self) -> tuple[type[SeqMismatchError], tuple[str]]:
        return type(self), (str(self),)


class CaseErasedError(ClientError):
    """The case was erased: its decisions cannot be read and it takes no more events (a new case id starts over)."""
