"""Waiting calls and the replies that complete them: a decision and its view, or the trigger's dead letter.

Routed on the replies reader's thread (kafka/reading/replies.py); each waiting call holds a Future, so a
thousand waiting calls are a thousand small objects, not a thousand consumers or threads.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from pipeline.client.errors import DecisionRefusedError
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.wire.dead_letter import refused_trigger
from pipeline.wire.decision import DecisionRecord
from pipeline.wire.record_keys import claimed_case
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.sealing import CaseCipher, CaseErasedError, open_body
from pipeline.wire.trigger import DecisionId, InvalidDecisionIdError
from pipeline.wire.view import ViewRecord

_LOG = logging.getLogger("pipeline.client")


@dataclass(frozen=True)
class Reply:
    """A published decision and its view (opened)."""

    record: DecisionRecord
    view: ViewRecord


# A completed reply stays this long for calls that start waiting for it late (a request, then its wait).
KEEP_COMPLETED_S = 300.0


@dataclass
class _Waiting:
    future: Future[Reply] = field(default_factory=Future)
    record: DecisionRecord | None = None
    view: ViewRecord | None = None
    completed_at: float | None = None


class Waiters:
    """The decisions this client waits for, by id; completed from the replies of one tenant's topics."""

    def __init__(self, names: TopicNames, tenant: str, cipher: CaseCipher | None) -> None:
        self._names, self._tenant, self._cipher = names, tenant, cipher
        self._waiting: dict[DecisionId, _Waiting] = {}
        self._lock = threading.Lock()
        self._pruned_at = time.monotonic()

    def __len__(self) -> int:
        """How many decisions are waited for (not completed yet)."""
        with self._lock:
            return sum(1 for w in self._waiting.values() if w.completed_at is None)

    def expect(self, decision_id: DecisionId) -> Future[Reply]:
        """The future of a decision (shared by every call waiting for the same id, completed or not)."""
        with self._lock:
            self._prune()
            return self._waiting.setdefault(decision_id, _Waiting()).future

    def _prune(self) -> None:
        """Drops replies completed long ago (at most once a second: the walk is over every entry)."""
        now = time.monotonic()
        if now - self._pruned_at < 1.0:
            return
        self._pruned_at = now
        for decision_id in [d for d, w in self._waiting.items()
                            if w.completed_at is not None and now - w.completed_at > KEEP_COMPLETED_S]:  # fmt: skip
            del self._waiting[decision_id]

    def erase(self, case: CaseRef, erased: Exception) -> None:
        """Drops the case's replies (their content is the erased case's) and fails the calls still waiting for one."""
        with self._lock:
            dropped = [d for d, w in self._waiting.items() if _of_case(w, case)]
            for decision_id in dropped:
                del self._waiting[decision_id]
            waiting = [(d, w) for d, w in self._waiting.items() if w.completed_at is None and w.record is not None
                       and w.record.case == case]  # fmt: skip
        for decision_id, _ in waiting:
            self.complete(decision_id, erased)

    def forget(self, decision_id: DecisionId) -> None:
        """Stops waiting for a decision (its callers gave up)."""
        with self._lock:
            self._waiting.pop(decision_id, None)

    def complete(self, decision_id: DecisionId, reply: Reply | Exception) -> None:
        """Completes the calls waiting for a decision: its reply (routed, or found by a lookup) or its refusal."""
        with self._lock:
            waiting = self._waiting.get(decision_id)
            if waiting is None or waiting.completed_at is not None:
                return
            waiting.completed_at = time.monotonic()
            if isinstance(reply, DecisionRefusedError) and reply.retryable:
                del self._waiting[decision_id]  # not kept: a request sent again waits for its own answer
        if isinstance(reply, Exception):
            waiting.future.set_exception(reply)
        else:
            waiting.future.set_result(reply)

    def route(self, record: RawRecord) -> None:
        """Hands one reply record to the call waiting for it, if any (called on the replies reader's thread)."""
        topic = record.topic or ""
        if topic == self._names.dlq:
            self._dead_letter(record)
        elif topic in (self._names.decisions, self._names.views):
            self._output(record, topic == self._names.decisions)

    def _output(self, record: RawRecord, is_decision: bool) -> None:
        try:
            decision_id = DecisionId.parse((record.key or b"").decode("utf-8", "replace"))
        except InvalidDecisionIdError:
            return
        with self._lock:
            waiting = self._waiting.get(decision_id)
        if waiting is None or waiting.completed_at is not None:
            return  # nobody waits for it, or its reply is in already (the same decision published twice)
        try:
            body = decode_object(record.value, "output")
            case = claimed_case(body)
            if case is not None and case.tenant != self._tenant:
                return  # another tenant's decision with the same id (shared topics)
            opened = open_body(body, self._cipher)
            if is_decision:
                waiting.record = DecisionRecord.from_wire(opened)
            else:
                waiting.view = ViewRecord.from_wire(opened)
        except (RejectedError, CaseErasedError) as exc:
            self.complete(decision_id, DecisionRefusedError.of(str(decision_id), Rejection.ERASED.value
                                                            if isinstance(exc, CaseErasedError) else exc.reason.value,
                                                            str(exc)))  # fmt: skip
            return
        if waiting.record is not None and waiting.view is not None:
            self.complete(decision_id, Reply(waiting.record, waiting.view))

    def _dead_letter(self, record: RawRecord) -> None:
        """A refused trigger of this tenant fails every waiting call for its decisions."""
        refusal = trigger_refusal(self._names, self._tenant, record)
        if refusal is None:
            return
        with self._lock:
            refused = [d for d, w in self._waiting.items()
                       if d.trigger_id == refusal.trigger_id and w.completed_at is None]  # fmt: skip
        for decision_id in refused:
            self.complete(decision_id, refusal.error(decision_id))


@dataclass(frozen=True)
class Refusal:
    """A worker's refusal of a trigger, from its dead letter."""

    trigger_id: str
    reason: str
    detail: str

    def error(self, decision_id: DecisionId) -> DecisionRefusedError:
        return DecisionRefusedError.of(str(decision_id), self.reason, self.detail)


def trigger_refusal(names: TopicNames, tenant: str, record: RawRecord) -> Refusal | None:
    """The refusal a dead letter holds when it is one of `tenant`'s triggers' (a `duplicate` is none)."""
    refused = refused_trigger(record.value, names.is_triggers)
    if refused is None or refused.tenant != tenant:
        return None
    return Refusal(refused.trigger_id, refused.letter.reason.value, refused.letter.detail)


def _of_case(waiting: _Waiting, case: CaseRef) -> bool:
    """Whether a completed reply is a decision of the case."""
    if waiting.completed_at is None or not waiting.future.done() or waiting.future.exception() is not None:
        return False
    return waiting.future.result().record.case == case
