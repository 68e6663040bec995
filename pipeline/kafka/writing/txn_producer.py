"""A transactional producer whose calls never hang and which is replaced whenever it cannot go on.

librdkafka's transactional calls can block long past their timeout: send_offsets_to_transaction
waits on a group coordinator it cached before an outage and never looks for the new one (seen
here for minutes after a single-node broker came back; librdkafka issues 5456 and 5511). So:

- every transactional call runs on a helper thread and is given up on after its timeout plus a
  grace; the producer is then abandoned (kept referenced, since its threads may still be inside
  it) and a new one with the same transactional id takes its place: its init_transactions fences
  the old one and aborts whatever it left open;
- a registered producer that has seen every broker go down is replaced before its next
  transaction, so the stale coordinator is never asked at all (one not registered yet has none
  to forget: its init_transactions is called again, as librdkafka allows after a timeout);
- a replaced producer is kept referenced for a while (the last RETIRED_KEPT of them): one whose
  transactional call timed out may still have that call queued inside librdkafka, and destroying
  it then aborts the process (an assertion in rd_kafka_enq_once_del_source_return, seen here when
  a door's broker came back after an outage).

Publishing raises one of three errors, which say what the caller should do: TransientPublishError
(try the same outputs again later), OutputsRefusedError (these outputs will never be accepted) and
PublishFailedError (a non-retriable failure whose cause is not known).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from pipeline.core.events import LogPosition
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.steps import Output

_LOG = logging.getLogger("pipeline.kafka.processing.transactions")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_T = TypeVar("_T")

# Seconds each transactional call may take (librdkafka's own timeout), and how long past it a
# call is waited for before the producer is abandoned.
CALL_TIMEOUT_S = 30.0
GRACE_S = 10.0
# A process whose producers hang this many times in a row gives up: something is wrong that a new
# producer does not fix, and an orchestrator restarting the process is the next remedy.
MAX_ABANDONED = 5
RETIRED_KEPT = 4  # replaced producers kept referenced: not destroyed while a timed-out call may be queued

# Errors a record's content causes: the same outputs would be refused again however often sent.
_REFUSED_CODES = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_MSG_SIZE,
    }
)


class TransientPublishError(KafkaAdapterError):
    """Not committed, for a reason that passes (a broker away, a coordinator moving, a hung call).

    Nothing was committed, except for CommitOutcomeUnknownError: its commit was sent and not answered.
    """


class CommitOutcomeUnknownError(TransientPublishError):
    """The commit was sent and no answer came: the coordinator may have committed the transaction, or not.

    Whoever keeps state beside the transactions reads it again after the next registration (whose
    init completes whatever the coordinator had begun) before saying whether the outputs were written.
    """


class OutputsRefusedError(KafkaAdapterError):
    """Nothing was committed: the broker or client refused these outputs (by index), and always will."""

    def __init__(self, message: str, refused: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.refused = refused or {}

    @classmethod
    def of(cls, refused: dict[int, str]) -> OutputsRefusedError:
        return cls(f"{len(refused)} output(s) refused: {next(iter(refused.values()), '')}", refused)

    def __reduce__(self) -> tuple[type[OutputsRefusedError], tuple[str, dict[int, str]]]:
        return type(self), (str(self), self.refused)


class PublishFailedError(KafkaAdapterError):
    """Nothing was committed, for a reason that does not pass and does not name an output."""


class ProducerFencedError(TransientPublishError):
    """Nothing was committed: a newer producer registered the same transactional id (it fenced this one).

    Transient for a worker (it is replaced, and the next registration fences the newer one in its
    turn); a writer that owns what it writes (kafka/writing/case_writer.py) learns that another took over.
    """


class ProducerExhaustedError(KafkaAdapterError):
    """Producers kept hanging; the process should stop and be started again."""


@dataclass
class ProducerStats:
    replaced: int = 0  # producers replaced after a fatal error, a hang or an outage
    abandoned: int = 0  # of those, producers given up on inside a call that did not return


class TransactionalProducer:
    """Publishes a batch's outputs with the input offsets in one transaction, or nothing."""

    def __init__(self, config: dict[str, Any], call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._config = {**config, "error_cb": self._on_error}
        self._timeout_s = call_timeout_s
        self._caller = DeadlineCaller("txn-calls")  # librdkafka's blocking calls, each within a deadline
        self._producer = self._new()
        self._ready = False  # init_transactions has succeeded on the current producer
        self.generation = 0  # successful init_transactions so far: each fences every earlier producer of the id
        self._suspect: str | None = None  # why the producer should be replaced before its next use
        self._abandoned: list[Producer] = []  # hung in a call: kept so their threads can finish
        self._retired: deque[Producer] = deque(maxlen=RETIRED_KEPT)
        self._hung_in_a_row = 0
        # A producer replaced or abandoned while registering may finish its init_transactions in librdkafka's
        # background once the broker is back, fencing the one that took its place: until a commit
        # succeeds, a fence may be this object's own doing.
        self._zombie_possible = False
        self.stats = ProducerStats()

    def _new(self) -> Producer:
        return Producer(self._config, logger=_LIB_LOG)

    def _on_error(self, error: KafkaError) -> None:
        """Error callback of librdkafka (served by poll and flush): every broker down marks the producer suspect."""
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._suspect = "every broker was down"

    def _call(self, what: str, work: Callable[[], _T], timeout_s: float | None = None) -> _T:
        """`work` on a thread of its own; a call that does not return in time abandons the producer."""
        limit = (timeout_s or self._timeout_s) + GRACE_S
        try:
            result = self._caller.call(work, limit)
        except FutureTimeout:
            self._abandon(what, limit)
            raise TransientPublishError(f"{what} did not return in {limit:.0f} s; the producer was replaced") from None
        self._hung_in_a_row = 0
        return result

    def _abandon(self, what: str, waited_s: float) -> None:
        _LOG.error("transactional producer hung in %s for %.0f s: abandoned, a new one takes its place", what, waited_s)
        self._abandoned.append(self._producer)
        self._zombie_possible = True
        self.stats.abandoned += 1
        self._hung_in_a_row += 1
        if self._hung_in_a_row >= MAX_ABANDONED:
            raise ProducerExhaustedError(f"{self._hung_in_a_row} transactional producers in a row hung")
        self._replace(f"it hung in {what}")

    def _replace(self, reason: str) -> None:
        """A new producer with the same transactional id, started on first use: its init fences the old one."""
        _LOG.warning("transactional producer replaced: %s", reason)
        self.stats.replaced += 1
        # Only a producer that may still be registering can fence its successor later: one replaced before
        # its init_transactions returned (librdkafka goes on with it in the background), or left hung.
        self._zombie_possible = self._zombie_possible or not self._ready
        self._suspect = None
        self._retired.append(self._producer)
        self._producer, self._ready = self._new(), False

    def ready(self, call_timeout_s: float | None = None) -> int:
        """Replaces a suspect producer and registers the transactional id of a new one; returns the generation.

        `call_timeout_s`: how long registering may take (default: the producer's call timeout).

        A caller that keeps state next to the transactions (a ledger of what was published) reads
        it again whenever the generation changes: only what was committed before the latest
        registration is final, since the registration aborted whatever was still open.
        """
        self.poll()
        if self._suspect is not None and self._ready:
            self._replace(self._suspect)
        self._suspect = None  # one not registered yet knows no coordinator from before: it registers again
        if self._ready:
            return self.generation
        producer = self._producer
        timeout_s = call_timeout_s or self._timeout_s
        try:
            self._call("init_transactions", lambda: producer.init_transactions(timeout_s), timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                self._replace(f"init_transactions failed: {error.str()}")
            raise TransientPublishError(f"could not start a transactional producer: {error.str()}") from exc
        self._ready = True
        self.generation += 1
        return self.generation

    def poll(self) -> None:
        """Serves the producer's callbacks (error reports among them); call between batches."""
        self._producer.poll(0)

    def publish(
        self,
        outputs: Sequence[Output],
        offsets: Sequence[TopicPartition] = (),
        group: object | None = None,
        *,
        generation: int | None = None,
        call_timeout_s: float | None = None,
    ) -> list[LogPosition]:
        """Produces `outputs` and commits them, with the consumer's `offsets` if any, in one transaction.

        Returns where each output was written, in order. With `generation`, refuses
        (TransientPublishError) to publish on a producer registered since. Raises
        TransientPublishError, OutputsRefusedError or PublishFailedError (ProducerFencedError when
        a newer producer of the id fenced this one); nothing is committed then, and no transaction
        is left open, except after CommitOutcomeUnknownError (the commit was sent and not answered:
        the producer is replaced, so the next registration settles it and the generation changes).
        `call_timeout_s` bounds each transactional call (default: the producer's): a caller with a
        deadline of its own (an agent's append) is not held past it by a commit.
        """
        # With a caller's time, each call gets what is left of it (a second at least), so a commit and
        # the abort after it together stay within the caller's bound; else each its own full timeout.
        end = time.monotonic() + (call_timeout_s or self._timeout_s)

        def left() -> float:
            return max(1.0, end - time.monotonic()) if call_timeout_s else self._timeout_s

        current = self.ready(left())
        if generation is not None and current != generation:
            raise TransientPublishError("the producer was registered again; what it guards must be read again")
        producer = self._producer
        failures: dict[int, KafkaError] = {}
        positions: dict[int, LogPosition] = {}
        committing = False
        try:
            self._call("begin_transaction", producer.begin_transaction)
            for index, out in enumerate(outputs):
                self._produce(producer, index, out, failures, positions)
            if offsets:
                sent = list(offsets)
                timeout_s = left()
                self._call("send_offsets_to_transaction",
                           lambda: producer.send_offsets_to_transaction(sent, group, timeout_s), timeout_s)  # fmt: skip
            commit_s = left()
            committing = True
            self._call("commit_transaction", lambda: producer.commit_transaction(commit_s), commit_s)
        except KafkaException as exc:
            # librdkafka sends EndTxn only once every record is delivered (the commit's flush): before, nothing
            # can have been committed; after, the coordinator may have committed without its answer arriving.
            # Counted before the abort, which may deliver what was left.
            end_txn_sent = committing and len(positions) == len(outputs)
            zombie_possible = self._zombie_possible  # before _end_failed, whose replacement may set it
            self._end_failed(producer, exc.args[0], left())
            error = self._own_fence(_classified(exc.args[0], failures), zombie_possible)
            if end_txn_sent and type(error) is TransientPublishError:
                raise self._unknown(exc.args[0].str()) from exc
            raise error from exc
        except TransientPublishError as exc:  # a call that hung (and was abandoned)
            if committing:  # its thread may still deliver the records and send EndTxn
                raise self._unknown(str(exc)) from exc
            raise
        self._zombie_possible = False
        return [positions[index] for index in range(len(outputs))]

    def _unknown(self, why: str) -> CommitOutcomeUnknownError:
        """What a commit sent and not answered raises; the producer is replaced, so its owner reads its state again.

        A new registration (its init_transactions) completes whatever the coordinator began, and a
        new generation tells whoever keeps state beside the transactions to read it again before
        numbering anything after it.
        """
        if self._ready:
            self._replace("its commit was not answered")
        return CommitOutcomeUnknownError(f"the commit was sent and not answered ({why}); its outcome is unknown")

    def _own_fence(self, error: KafkaAdapterError, zombie_possible: bool) -> KafkaAdapterError:
        """A fence by a producer this object replaced is no other writer's: registering again ends it."""
        if not (isinstance(error, ProducerFencedError) and zombie_possible):
            return error
        if self._ready:  # not replaced by _end_failed (a fence is fatal: it was)
            self._replace("fenced, perhaps by a producer of its own it replaced")
        return TransientPublishError(f"{error}; a producer of its own may have done it: registering again")

    def _produce(self, producer: Producer, index: int, out: Output, failures: dict[int, KafkaError],
                 positions: dict[int, LogPosition]) -> None:  # fmt: skip
        def delivered(error: KafkaError | None, msg: Message) -> None:
            if error is not None:
                failures[index] = error
            else:
                positions[index] = LogPosition(msg.partition() or 0, msg.offset() or 0)

        for _ in range(100):  # a full local queue empties as the broker acknowledges
            try:
                if out.partition is None:
                    producer.produce(out.topic, value=out.value, key=out.key, headers=list(out.headers),
                                     on_delivery=delivered)  # fmt: skip
                else:
                    producer.produce(out.topic, value=out.value, key=out.key, headers=list(out.headers),
                                     partition=out.partition, on_delivery=delivered)  # fmt: skip
            except BufferError:
                producer.poll(0.1)
                continue
            except KafkaException as exc:
                failures[index] = exc.args[0]
                raise
            return
        raise KafkaException(KafkaError(KafkaError._QUEUE_FULL, "the local queue stayed full"))

    def _end_failed(self, producer: Producer, error: KafkaError, timeout_s: float) -> None:
        """Leaves no transaction open: aborts it, or replaces a producer that cannot go on."""
        if error.fatal():
            self._replace(f"fatal error: {error.str()}")
            return
        try:
            self._call("abort_transaction", lambda: producer.abort_transaction(timeout_s), timeout_s)
        except KafkaException as exc:
            self._replace(f"abort failed: {exc.args[0].str()}")
        except TransientPublishError:
            pass  # it hung and was replaced: the new producer's init aborts the transaction

    def close(self) -> None:
        producer = self._producer
        try:
            self._call("flush", lambda: producer.flush(10), timeout_s=10)
        except TransientPublishError as exc:
            _LOG.warning("closing the transactional producer: %s", exc)
        finally:
            self._caller.close()


# Errors that say nothing against the outputs: the broker was away, the transaction was aborted and
# its queued records purged, or the deployment is wrong (a topic missing, an ACL not granted). The
# last kind does not pass by itself, but no record is at fault: dead-lettering every record until an
# operator fixes it would turn good input into dead letters, so it is retried and logged instead.
_NOT_THE_RECORDS_FAULT = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def _passes(error: KafkaError) -> bool:
    return error.retriable() or error.fatal() or error.txn_requires_abort() or error.code() in _NOT_THE_RECORDS_FAULT


_Call = tuple[Callable[[], Any], "Future[Any]"]


class DeadlineCaller:
    """Runs calls one at a time on a daemon thread, each within a deadline; TimeoutError leaves it behind.

    One thread serves every call: a thread started for each call cost more CPU than the transaction
    it waited for. A call that overruns its deadline keeps its thread, which ends once the call
    returns, and the next call starts a new one. Daemon threads, unlike an executor's, are not waited
    for when the interpreter exits, so a call that never returns cannot keep the process from ending.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] | None = None

    def call(self, work: Callable[[], _T], deadline_s: float) -> _T:
        calls = self._calls
        if calls is None:
            calls = self._calls = queue.SimpleQueue()
            threading.Thread(target=_serve_calls, args=(calls,), name=self._name, daemon=True).start()
        future: Future[_T] = Future()
        calls.put((work, future))
        try:
            return future.result(timeout=deadline_s)
        except FutureTimeout:
            calls.put(None)  # its thread ends after the call it is stuck in
            self._calls = None
            raise

    def close(self) -> None:
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None


def _serve_calls(calls: queue.SimpleQueue[_Call | None]) -> None:
    while (call := calls.get()) is not None:
        work, future = call
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            future.set_exception(exc)


# A newer producer with the same transactional id registered: this one can never commit again.
_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def _classified(error: KafkaError, failures: dict[int, KafkaError]) -> KafkaAdapterError:
    """What a failed transaction means for the caller, from its error and its outputs' delivery errors."""
    refused = {i: e.str() for i, e in failures.items() if e.code() in _REFUSED_CODES}
    if refused:
        return OutputsRefusedError.of(refused)
    if error.code() in _FENCED_CODES or any(e.code() in _FENCED_CODES for e in failures.values()):
        return ProducerFencedError(f"transaction not committed: {error.str()} (a newer producer took the id over)")
    lasting = [e for e in failures.values() if not _passes(e)]
    if not lasting and _passes(error):
        return TransientPublishError(f"transaction not committed: {error.str()}")
    return PublishFailedError(f"transaction not committed: {'; '.join(e.str() for e in lasting) or error.str()}")
