"""What a failed transaction means for the loop: pass and retry, refused outputs, or an unknown lasting failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.processing.steps import Output, oversized
from pipeline.kafka.writing.txn_producer import (
    CommitOutcomeUnknownError,
    DeadlineCaller,
    OutputsRefusedError,
    ProducerFencedError,
    PublishFailedError,
    TransactionalProducer,
    TransientPublishError,
    _classified,
)


def _error(code: int, *, fatal: bool = False, retriable: bool = False, abort: bool = False) -> KafkaError:
    return KafkaError(code, "test", fatal=fatal, retriable=retriable, txn_requires_abort=abort)


def test_the_broker_away_and_an_aborted_transaction_pass() -> None:
    timed_out = _error(KafkaError._TIMED_OUT, retriable=True)
    assert isinstance(_classified(timed_out, {}), TransientPublishError)
    purged = {0: _error(KafkaError._PURGE_QUEUE), 1: _error(KafkaError._MSG_TIMED_OUT)}
    assert isinstance(_classified(_error(KafkaError._STATE, abort=True), purged), TransientPublishError)
    fenced = _error(KafkaError._FENCED, fatal=True)
    assert isinstance(_classified(fenced, {}), TransientPublishError)  # a new producer takes over


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH])
def test_a_fenced_producer_says_so_and_stays_transient_for_a_worker(code: int) -> None:
    # A worker retries (its replacement fences the newer one); a case's writer tells its caller another took over.
    classified = _classified(_error(code, fatal=True), {})
    assert isinstance(classified, ProducerFencedError)
    assert isinstance(classified, TransientPublishError)
    assert isinstance(_classified(_error(KafkaError._STATE, abort=True), {0: _error(code)}), ProducerFencedError)


def test_a_deployment_fault_is_retried_not_blamed_on_the_record() -> None:
    """A missing topic or ACL is fixed by an operator: dead-lettering every record meanwhile would lose good input."""
    denied = {0: _error(KafkaError.TOPIC_AUTHORIZATION_FAILED)}
    assert isinstance(_classified(_error(KafkaError._STATE, abort=True), denied), TransientPublishError)


def test_outputs_the_broker_refuses_are_named() -> None:
    refused = _classified(_error(KafkaError._STATE, abort=True), {2: _error(KafkaError.MSG_SIZE_TOO_LARGE)})
    assert isinstance(refused, OutputsRefusedError)
    assert set(refused.refused) == {2}


def test_an_unknown_lasting_failure_is_neither() -> None:
    lasting = _classified(_error(KafkaError._INVALID_ARG), {})
    assert isinstance(lasting, PublishFailedError)


def test_oversized_counts_key_value_and_headers_against_the_limit() -> None:
    small = Output("t", b"k", b"v" * 100)
    big = Output("t", b"k", b"v" * 400, (("h", b"x" * 200),))
    assert oversized([small, big], 1_100) is big
    assert oversized([small], 1_100) is None


def test_a_call_past_its_deadline_is_left_behind_on_a_daemon_thread() -> None:
    caller = DeadlineCaller("calls")
    assert caller.call(lambda: 41, 5) == 41
    first = [t for t in threading.enumerate() if t.name == "calls"]
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        caller.call(release.wait, 0.2)
    assert time.monotonic() - started < 2
    hung = [t for t in threading.enumerate() if t.name == "calls"]
    assert hung == first  # the thread that served the first call is the one stuck
    assert all(t.daemon for t in hung)  # never waited for at interpreter exit
    assert caller.call(lambda: 42, 5) == 42  # on a thread of its own
    with pytest.raises(ZeroDivisionError):
        caller.call(lambda: 1 // 0, 5)
    release.set()
    first[0].join(5)
    assert not first[0].is_alive()  # it ended once its call returned
    caller.close()


def test_one_thread_serves_calls_in_turn() -> None:
    caller = DeadlineCaller("in-turn")
    served = {caller.call(lambda: threading.current_thread().ident, 5) for _ in range(20)}
    assert len(served) == 1
    caller.close()


class _Unanswered:
    """A librdkafka producer whose broker takes the records and never answers the step `fails_at`."""

    def __init__(self, fails_at: str) -> None:
        self.fails_at = fails_at

    def _step(self, name: str) -> None:
        if name == self.fails_at:
            raise KafkaException(_error(KafkaError._TIMED_OUT, retriable=True))

    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        self._step("begin")

    def produce(self, topic: str, on_delivery: Callable[[KafkaError | None, object], None], **kwargs: object) -> None:
        self._step("produce")
        if self.fails_at != "flush":  # else the commit's flush never delivers the record: EndTxn is never sent
            on_delivery(None, _Delivered())

    def commit_transaction(self, timeout: float) -> None:
        self._step("commit")
        if self.fails_at == "flush":
            raise KafkaException(_error(KafkaError._TIMED_OUT, retriable=True))

    def abort_transaction(self, timeout: float) -> None:
        pass

    def poll(self, timeout: float = 0) -> int:
        return 0


class _Delivered:
    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


@pytest.mark.parametrize(("fails_at", "unknown"), [("begin", False), ("produce", False), ("flush", False),
                                                   ("commit", True)])  # fmt: skip
def test_only_a_commit_left_unanswered_has_an_unknown_outcome(fails_at: str, unknown: bool) -> None:
    """Before the commit is sent nothing can be committed; after, the coordinator may have committed it."""
    fake = _Unanswered(fails_at)

    class _Producer(TransactionalProducer):
        def _new(self) -> _Unanswered:  # type: ignore[override]
            return fake

    producer = _Producer({"transactional.id": "t"}, call_timeout_s=1)
    generation = producer.ready()
    with pytest.raises(TransientPublishError) as failed:
        producer.publish([Output("topic", b"k", b"v", ())])
    assert isinstance(failed.value, CommitOutcomeUnknownError) is unknown
    # An unknown outcome replaces the producer even when its abort succeeded: the next registration is a
    # new generation, so a case writer reads its head again before numbering anything after it.
    assert (producer.ready() != generation) is unknown


class _FencedAtCommit(_Unanswered):
    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(_error(KafkaError._FENCED, fatal=True))


def test_a_fence_after_a_producer_was_left_hung_is_taken_for_its_own_and_registration_runs_again() -> None:
    """A replaced producer may finish its init_transactions once the broker is back, fencing its successor."""
    made: list[_FencedAtCommit] = []

    class _Producer(TransactionalProducer):
        def _new(self) -> _FencedAtCommit:  # type: ignore[override]
            made.append(_FencedAtCommit("none"))
            return made[-1]

    producer = _Producer({"transactional.id": "t"}, call_timeout_s=1)
    with pytest.raises(ProducerFencedError):  # no producer of its own left behind: another writer took the id
        producer.publish([Output("topic", b"k", b"v", ())])
    producer._zombie_possible = True  # as a replacement leaves it, until a commit succeeds
    with pytest.raises(TransientPublishError) as failed:
        producer.publish([Output("topic", b"k", b"v", ())])
    assert not isinstance(failed.value, ProducerFencedError)
    assert producer.stats.replaced >= 2  # replaced: the next call registers a new producer, fencing the hung one
