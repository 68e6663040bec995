"""The Summ-only baseline as its own consumer group, built with faust-streaming.

It consumes the events topic and makes one summarization call per event and maintained budget,
keeping each case's memory after every step in changelog-backed tables (a restarted worker
recovers them from the changelog). The task it summarizes for is the one the case's first event
declares (else the worker's default domain). On a trigger naming `summ` it makes the decision call
over the memory after the trigger's last event and publishes the view, the decision and the N+1
audit records to the same output topics as the projection workers.

faust delivers records at least once and commits their offsets itself; what a record produces
(a decision, a dead letter) is published exactly once through a ledger kept in the same
transactions (pipeline.kafka.processing.once). The event loop never waits on Kafka: sealing, opening and
publishing run on one I/O thread, model calls on their own pool.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import faust
from faust.transport.conductor import Conductor
from faust.transport.consumer import Consumer
from faust.types import TP

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition
from pipeline.core.model import ModelBackend, ModelBackendError
from pipeline.core.run import SummVariant
from pipeline.core.task import Architecture
from pipeline.core.window import Window
from pipeline.kafka.cluster.partitioning import case_partition
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.once import OncePublisher
from pipeline.kafka.processing.steps import Output, oversized
from pipeline.kafka.writing.txn_producer import OutputsRefusedError, PublishFailedError
from pipeline.keys.providers import KeyRevokedError, KeyServiceUnavailableError
from pipeline.observability.metrics import PipelineMetrics
from pipeline.wire.headers import header_pairs
from pipeline.wire.key import erases
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import TriggerLimits
from pipeline.workers.baseline.acking import InOrderAcks, Rewinds
from pipeline.workers.baseline.deciding import Deciding
from pipeline.workers.baseline.dispatch import CaseOrdered, ordering_key
from pipeline.workers.baseline.durable import DurableTable, collect_writes, delivered
from pipeline.workers.baseline.folding import Folding
from pipeline.workers.baseline.outcome import Outcome, PartitionRevoked
from pipeline.workers.baseline.stalls import IdleClocks, Stalls
from pipeline.workers.baseline.tenancy import KINDS, REFRESH_S, BaselineInputs
from pipeline.workers.baseline.transport import CommittedConsumer
from pipeline.workers.publishing import dead_letter, worker_source

_LOG = logging.getLogger("pipeline.workers.baseline")
# The partition and group generation of the record the current task handles (see check_owned).
_HANDLING: ContextVar[tuple[TP, int | None] | None] = ContextVar("summ_handling", default=None)
_T = TypeVar("_T")
_MODEL_ATTEMPTS = 3
_RETRY_BACKOFF_S = 2.0
_MAX_BACKOFF_S = 10.0  # waiting for Kafka: doubling pauses up to this
_PUBLISH_ATTEMPTS = 3  # outputs the broker refuses: tries, then the dead letter's tries, then nothing
_STALL_AFTER_S = 15.0  # an input partition with no progress for this long, records waiting and none in flight
# faust waits this long after a subscription change before it subscribes (its default, 45 s, coalesces
# changes made in quick succession; the tenant refresh coalesces them already, every REFRESH_S).
_RESUBSCRIBE_AFTER_S = 5.0


@dataclass(frozen=True)
class BaselineOptions:
    worker_id: str
    partitions: int
    datadir: Path
    app_id: str = "dpm-baseline"
    budgets: tuple[int, ...] = (5352,)
    default_domain: str = "loan"
    variant: SummVariant = SummVariant.REWRITE
    trigger_wait_s: float = 60.0
    session_timeout_s: float = 10.0
    limits: TriggerLimits = field(default_factory=TriggerLimits)
    max_event_bytes: int = 256 * 1024  # see folding.MAX_BASELINE_EVENT_BYTES
    concurrency: int = 8  # model calls in flight, each for a different case
    max_record_bytes: int = 1_000_000  # librdkafka's message.max.bytes for the outputs
    key_service_wait_s: float = 30.0  # a trigger retried while the key service does not answer (the worker's too)

    @property
    def ledger_topic(self) -> str:
        return f"{self.app_id}-published"


def _record(event: Any) -> RawRecord:  # noqa: ANN401 - faust's EventT
    msg = event.message
    return RawRecord(
        LogPosition(msg.partition, msg.offset),
        msg.key,
        msg.value,
        int(msg.timestamp * 1000) if msg.timestamp else None,
        header_pairs(msg.headers),
        topic=msg.topic,
    )


def _fetch_state(consumer: Consumer, tp: TP) -> str:
    """What faust's consumer believes of `tp`: whether it fetches it, has paused it, holds it back for a full buffer."""
    # faust keeps no public view of its fetch state; these are read for the log line only.
    active = consumer._active_partitions
    client = getattr(getattr(consumer, "_thread", None), "_consumer", None)  # the aiokafka consumer, once started
    client_paused = tp in {TP(p.topic, p.partition) for p in client.paused()} if client is not None else None
    return (f"active={active is None or tp in active} paused={tp in consumer._paused_partitions} "
            f"buffered={tp in consumer._buffered_partitions} read_offset={consumer._read_offset.get(tp)} "
            f"flow_active={consumer.flow_active} in_recovery={consumer.app.in_recovery} "
            f"client_paused={client_paused}")  # fmt: skip


class Baseline:
    """The faust app; agents delegate to methods whose only state is in the changelog-backed tables."""

    def __init__(
        self,
        options: BaselineOptions,
        inputs: BaselineInputs,
        backend: ModelBackend,
        connection: Mapping[str, Any],
        client_config: dict[str, str],
        *,
        metrics: PipelineMetrics | None = None,
        cipher: CaseCipher | None = None,
        seal: bool = False,
        window: Window | None = None,
    ) -> None:
        self.options, self.inputs, self.backend, self.metrics = options, inputs, backend, metrics
        self.window = window  # the model's window: an event whose step would not fit is folded in parts
        self.cipher = cipher
        self._waiting_for_kafka = 0  # handlings now waiting for Kafka to answer (see waiting_for_kafka)
        self._idle: IdleClocks[tuple[str, int]] = IdleClocks()  # (topic, partition): how long nothing was finished
        self._acks: InOrderAcks[Any] = InOrderAcks()  # faust's events, acknowledged in offset order (acking.py)
        self._rewinds = Rewinds()  # readings that started past their committed offset, sought back (acking.py)
        self._stalls: Stalls[TP] = Stalls(_STALL_AFTER_S)
        # Model calls: one thread per call in flight (cases run concurrently, see _consume). Kafka and
        # the key topic: one thread, so the event loop never blocks and the keys are used in order.
        self.calls = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="summ-call")
        self.io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="summ-io")
        source = worker_source(Architecture.SUMM, options.worker_id)
        self.publisher = OncePublisher(client_config, options.ledger_topic, f"{options.app_id}-publish", source)
        self.app = faust.App(
            options.app_id,
            **connection,
            store="memory://",
            topic_partitions=options.partitions,
            datadir=str(options.datadir),
            web_enabled=False,
            broker_session_timeout=options.session_timeout_s,
            consumer_auto_offset_reset="earliest",
            processing_guarantee="at_least_once",
            # A rebalance does not wait for records in flight (see check_owned): a trigger waiting for its
            # events would otherwise hold the group's rebalance until its wait ran out.
            stream_wait_empty=False,
            # Commit progress often: a restarted member then redoes little, and a trigger that arrived
            # while it was down is found at the committed position.
            broker_commit_interval=1.0,
            topic_allow_declare=False,  # every topic exists before the app starts (service.ensure_baseline_topics)
            Table=DurableTable,  # a record is acknowledged once the state it left is stored (durable.py)
        )
        # case key -> CaseState.to_json(); step_key(case, budget, seq) -> SummStep.to_json()
        self.cases = self.app.Table("summ-cases", partitions=options.partitions)
        self.steps = self.app.Table("summ-steps", partitions=options.partitions)
        # Per case: its last triggers decided or refused as duplicates (HandledTriggers; only decide writes it)
        self.decided = self.app.Table("summ-decided", partitions=options.partitions)
        self.folding = Folding(self, cipher, seal)
        self.deciding = Deciding(self, cipher, seal)
        self._topics = {kind: self._raw_topic(*inputs.topics(kind)) for kind in KINDS}
        self.app.agent(self._topics["events"], name="summ-events")(self._on_events)
        self.app.agent(self._topics["triggers"], name="summ-triggers")(self._on_triggers)
        self.app.agent(self._topics["keys"], name="summ-keys")(self._on_keys)
        self.app.on_partitions_assigned.connect(self._on_assigned)
        if metrics is not None:
            self.app.timer(interval=5.0, name="summ-lag")(self._report_lag)
        self.app.timer(interval=5.0, name="summ-stalls")(self._look_for_stalls)
        self._list_topics: Callable[[], Mapping[str, int]] | None = None
        if inputs.by_topic:
            conductor = cast(Conductor, self.app.topics)  # faust's transport conductor: ConductorT lacks the knob
            conductor._resubscribe_sleep_lock_seconds = _RESUBSCRIBE_AFTER_S
            self.app.timer(interval=REFRESH_S, name="summ-tenants")(self._refresh_tenants)

    async def blocking(self, work: Callable[..., _T], *args: Any) -> _T:  # noqa: ANN401 - passed through
        """`work(*args)` on the I/O thread (sealing, opening, Kafka): the event loop never waits on it."""
        return await asyncio.get_running_loop().run_in_executor(self.io, functools.partial(work, *args))

    async def model(self, work: Callable[[], _T]) -> _T:
        """`work()` (model calls) on the model pool."""
        return await asyncio.get_running_loop().run_in_executor(self.calls, work)

    def case_partition(self, case: CaseRef) -> int:
        return case_partition(case, self.options.partitions)

    def events_of(self, case: CaseRef) -> TP:
        """The events partition that holds the case's events (its tenant's own topic, or the shared one)."""
        return TP(self.inputs.scope(case.tenant).events, self.case_partition(case))

    def follow_tenants(self, list_topics: Callable[[], Mapping[str, int]]) -> None:
        """With tenancy by topic: `list_topics` (every topic and its partition count) is asked every REFRESH_S."""
        self._list_topics = list_topics

    async def _refresh_tenants(self) -> None:
        """Subscribes to tenants onboarded since the last look, and drops those removed (tenancy.py)."""
        if self._list_topics is None:
            return
        try:
            counts = await self.blocking(self._list_topics)
        except KafkaAdapterError as exc:
            _LOG.warning("the tenants were not listed: %s", exc)
            return
        before = {kind: self.inputs.topics(kind) for kind in self._topics}
        changed, problems = self.inputs.update(counts)
        for problem in problems:
            _LOG.error(problem, extra={"worker_id": self.options.worker_id})
        if changed:
            _LOG.info("reading the topics of tenants %s", ", ".join(self.inputs.tenants) or "(none)",
                      extra={"worker_id": self.options.worker_id})  # fmt: skip
            for kind, topic in self._topics.items():
                self._subscribe(topic, before[kind], self.inputs.topics(kind))

    def _subscribe(self, topic: Any, before: list[str], after: list[str]) -> None:  # noqa: ANN401 - faust's TopicT
        """Points an agent's topic, and the copy of it faust subscribed with, at `after`, and resubscribes.

        faust's conductor holds a clone of each agent's topic and subscribes to the names of its
        clones; a clone taken out and put back flags the subscription as changed.
        """
        conductor = self.app.topics
        topic.topics = list(after)  # an agent restarted after a crash iterates its topic again
        for channel in [c for c in conductor if set(c.topics) == set(before)]:
            conductor.discard(channel)
            channel.topics = list(after)
            conductor.add(channel)

    async def events_end(self, tp: TP) -> int | None:
        """The events partition's end (its high watermark), asked of the broker; None while Kafka does not answer."""
        try:
            ends = await self.app.consumer.highwaters(tp)
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors while the broker is away: unknown, not failed
            _LOG.debug("the end of %s is unknown: %s", tp, exc)
            self._idle.kafka_failed(time.monotonic())
            return None
        return ends.get(tp)

    async def events_position(self, tp: TP) -> int | None:
        """The next events offset this member will fetch in the events partition `tp`, if it owns it."""
        if tp not in self.app.consumer.assignment():
            return None
        position: int | None = await self.app.consumer.position(tp)
        return position

    async def _on_assigned(self, _sender: Any, /, *_: Any, signal: Any, **__: Any) -> None:  # noqa: ARG002, ANN401
        """After a rebalance every partition's producer is registered again and its ledger read again (once.py).

        A partition's idle clock (idle_for) starts again at each assignment: a member that has just
        taken a backlog over, or reads a partition again from its commit, is not idle before it
        could finish a record.
        """
        now = time.monotonic()
        assigned = self.app.consumer.assignment()
        for tp in assigned:
            self._idle.assigned((tp.topic, tp.partition), now)
        self._acks.keep_only(assigned)
        self._rewinds.keep_only(assigned)
        try:
            await self._rewind()
        except Exception as exc:  # noqa: BLE001 - an error here would stop the member (faust crashes the app)
            # Kafka just back may not answer yet. Nothing is lost: a partition whose reading starts past
            # its committed offset is sought back there when its first record comes (_sought_back).
            _LOG.warning("input partitions not sought back to their commits after a rebalance: %r", exc,
                         extra={"worker_id": self.options.worker_id})  # fmt: skip
        await self.blocking(self.publisher.forget)

    async def _rewind(self) -> None:
        """Every input partition assigned is fetched again from its committed offset, or its start if none.

        Records in flight at a rebalance are dropped unacknowledged (check_owned) and must be
        fetched again; faust seeks a partition back only to a committed offset above 0, so a
        partition kept through a rebalance before anything of it was committed went on from
        where its fetching had got to, and the dropped records were never handled. The seek is
        faust's own, never only the client's: faust drops a fetched record below the last offset it
        delivered (its read offset), and this runs while recovery may have delivered records of the
        new generation already; a client-only seek back then had every record up to there dropped.
        """
        consumer = cast(Consumer, self.app.consumer)  # faust's transport consumer: ConsumerT lacks seek_to_committed
        committed = await consumer.seek_to_committed()
        assigned = self._input_partitions()
        never = [tp for tp in assigned if not committed.get(tp)]
        starts = await consumer.earliest_offsets(*never) if never else {}
        await self._seek({tp: committed.get(tp) or starts[tp] for tp in assigned})

    async def _seek(self, positions: dict[TP, int]) -> None:
        """Moves fetch positions, and faust's read offsets with them, before the next record is taken.

        faust's `seek`, whose client seek runs on the consumer's own thread (transport.py). Not its
        `seek_wait`: that sets the read offsets on the consumer's thread before waiting for the new
        positions, and records this thread handed over meanwhile moved them forward again (a case's
        events then skipped: sequence gaps).
        """
        consumer = cast(Consumer, self.app.consumer)
        for tp, offset in positions.items():
            await consumer.seek(tp, offset)

    def _input_partitions(self) -> list[TP]:
        """The events and triggers partitions this member is assigned (not its tables' changelogs)."""
        inputs = self.inputs.inputs()
        return [tp for tp in self.app.consumer.assignment() if tp.topic in inputs]

    async def _report_lag(self) -> None:
        """Exports this member's lag on the events and triggers topics (highwater minus position).

        A rebalance or a resubscription can take a partition away between listing and asking
        (aiokafka then asserts): that look is skipped, since an exception in a faust timer crashes the app.
        """
        metrics = self.metrics
        if metrics is None:
            return
        consumer = self.app.consumer
        for topic in sorted(self.inputs.inputs()):
            lags = {}
            try:
                for tp in consumer.assignment():
                    if tp.topic == topic:
                        position = await consumer.position(tp)
                        highwater = consumer.highwater(tp)
                        if position is not None and highwater is not None and highwater >= 0:
                            lags[tp.partition] = max(0, highwater - position)
            except Exception as exc:  # noqa: BLE001 - aiokafka's assertions and errors mid-rebalance: look again later
                _LOG.debug("no lag of %s this time: %r", topic, exc)
                continue
            metrics.observe_lag(self.app.conf.id, topic, lags)

    async def _look_for_stalls(self) -> None:
        """Reads input partitions again: stalled ones (stalls.py), and those faust dropped fetched records of.

        A partition faust dropped fetched records of in this generation (transport.py) is read again
        once nothing of it is in flight: its fetch position is past records never handled.

        The committed offset and the end are asked of faust's records and of the broker: a partition
        this member never fetched has no end in the fetcher's cache.
        """
        consumer = cast(Consumer, self.app.consumer)
        if self.app.in_recovery or not consumer.flow_active:
            return  # a rebalance under way: partitions are paused and read again from their commits by design
        assigned = self._input_partitions()
        self._stalls.keep_only(set(assigned))
        generation = self.app.consumer_generation_id
        try:  # one request each for every partition: a look must end well within the 5 s between looks
            ends = await consumer.highwaters(*assigned)
            unknown = [tp for tp in assigned if consumer._committed_offset.get(tp) is None]  # faust keeps no view
            starts = await consumer.earliest_offsets(*unknown) if unknown else {}
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors while the broker is away: look again later
            _LOG.debug("no look at the input partitions: %s", exc)
            self._idle.kafka_failed(time.monotonic())
            return
        dropped = cast(CommittedConsumer, consumer).dropped
        for tp in [tp for tp in dropped if tp not in assigned]:
            del dropped[tp]  # a table's changelog (read by faust's recovery), or no longer this member's
        for tp in assigned:
            end = ends.get(tp)
            committed = consumer._committed_offset.get(tp)
            if committed is None:
                committed = starts.get(tp, 0)
            in_flight = self._acks.unfinished(tp, generation)
            stalled_for = self._stalls.observe(tp, committed, end, in_flight, time.monotonic())
            if dropped.get(tp, generation) != generation:
                del dropped[tp]  # in an earlier generation: the rebalance since read the partition again (_rewind)
            read_dropped = tp in dropped and not in_flight
            if read_dropped:
                del dropped[tp]
            if stalled_for or read_dropped:
                await self._read_again(tp, committed, end, stalled_for)

    async def _read_again(self, tp: TP, committed: int, end: int | None, stalled_for: float) -> None:
        """Reads a partition again from its committed offset (unless no longer this member's), saying why.

        Why: it made no progress for `stalled_for` seconds, or (0) faust dropped records of it it had
        fetched (transport.py) and nothing of it is in flight any more.
        """
        consumer = cast(Consumer, self.app.consumer)
        try:
            position = await consumer.position(tp)
            why = f"made no progress for {stalled_for:.0f} s" if stalled_for else "had fetched records dropped"
            _LOG.warning("%s[%d] %s from offset %d to its end %s (fetch position %s), nothing of it in flight: %s; "
                         "reading it again from offset %d", tp.topic, tp.partition, why, committed, end, position,
                         _fetch_state(consumer, tp), committed,
                         extra={"worker_id": self.options.worker_id})  # fmt: skip
            consumer.resume_partitions({tp})
            await self._seek({tp: committed})
        except Exception as exc:  # noqa: BLE001 - taken away by a rebalance meanwhile: nothing to read again
            _LOG.debug("%s left this member before it was read again: %r", tp, exc)

    def _raw_topic(self, *names: str) -> Any:  # noqa: ANN401 - faust's TopicT
        return self.app.topic(
            *names, internal=False, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    def refusal(self, record: RawRecord, source: str, exc: RejectedError) -> Outcome:
        """A refused record's dead letter, counted once it is committed.

        An event's dead letter is sealed under its case's key (which may publish a new data key): call
        it off the event loop (`_refused`) for records of the events topics.
        """
        _LOG.warning("record at %s of %s rejected: %s", record.position, source, exc,
                     extra={"worker_id": self.options.worker_id})  # fmt: skip
        letter = self._dead_letter(record, source, exc.reason, exc.detail)
        metrics = self.metrics
        return Outcome([letter], (lambda: metrics.observe_rejection(exc.reason)) if metrics else lambda: None)

    def _dead_letter(self, record: RawRecord, source: str, reason: Rejection, detail: str) -> Output:
        """The record's dead letter on its scope's dead-letter topic, an event's content sealed when sealing is on."""
        return dead_letter(self.inputs.scope_of(source), record, source_topic=source, reason=reason, detail=detail,
                           worker_id=self.options.worker_id, cipher=self.folding.sealing)  # fmt: skip

    async def _refused(self, record: RawRecord, source: str, exc: RejectedError) -> Outcome:
        """`refusal` off the event loop, waiting for Kafka while a new data key cannot be published."""
        return await self._sealing(record, source, functools.partial(self.blocking, self.refusal, record, source, exc))

    async def _sealing(self, record: RawRecord, source: str, work: Callable[[], Awaitable[_T]]) -> _T:
        """`await work()`, which seals a record's dead letter: Kafka and the key service waited for, without end.

        An event's dead letter keeps its content sealed under the case's key; a key service that
        does not answer is no reason to lose it, nor to let the record go unanswered.
        """
        attempts = 0
        while True:
            try:
                return await self._until_kafka_answers(work)
            except KeyServiceUnavailableError as exc:
                self.check_owned()  # a partition handed over meanwhile is its new owner's to answer
                attempts += 1
                _LOG.warning("the dead letter of the record at %s of %s waits for the key service (%s)",
                             record.position, source, exc)  # fmt: skip
                await asyncio.sleep(_key_service_pause(attempts))

    async def _consume(self, stream: Any, handle: Callable[[RawRecord], Awaitable[Outcome]]) -> None:  # noqa: ANN401
        """Feeds each record of a faust stream to `handle`, cases concurrently; refused input becomes a dead letter.

        A record is acknowledged once its outcome is committed and every earlier record of its
        partition is acknowledged (acking.py), so a crash redoes work rather than losing it; the
        ledger keeps redone work from being published twice.
        """
        cases = CaseOrdered(pending=4 * self.options.concurrency)
        try:
            async for event in stream.noack().events():
                message = event.message
                tp, generation, offset = message.tp, message.generation_id, message.offset
                if self._rewinds.skips(tp, generation, offset):
                    continue  # fetched before its partition was sought back: its copy read after the seek is handled
                if self._acks.starts(tp, generation, offset) and await self._sought_back(tp, generation, offset):
                    continue  # this record is fetched again after the seek
                self._acks.read(tp, generation, offset, event)
                # The task copies this context: table writes go to the changelog partition of `event`.
                work = functools.partial(self._acked, event, message.topic, handle)
                await cases.submit(ordering_key(event.message.key), work)
        except asyncio.CancelledError:  # stopping: a model call in flight is not waited for
            cases.cancel()
            raise
        await cases.drain()

    async def _sought_back(self, tp: TP, generation: int | None, offset: int) -> bool:
        """Seeks a partition whose reading starts past its committed offset back there (acking.Rewinds)."""
        committed = await self._log_reading(tp, generation, offset)
        if not self._rewinds.needed(tp, generation, offset, committed):
            return False
        _LOG.warning("%s[%d]: reading started at offset %d past the committed %d; read again from there", tp.topic,
                     tp.partition, offset, committed, extra={"worker_id": self.options.worker_id})  # fmt: skip
        await self._seek({tp: committed})
        return True

    async def _log_reading(self, tp: TP, generation: int | None, offset: int) -> int:
        """Says where a partition's reading starts against what faust last committed; returns the latter.

        With nothing committed, the partition's earliest offset stands for it (where the group starts).
        """
        consumer = cast(Consumer, self.app.consumer)
        committed = consumer._committed_offset.get(tp)  # faust keeps no public view of it
        _LOG.info("reading %s[%d] from offset %d in generation %s (committed: %s)", tp.topic, tp.partition, offset,
                  generation, committed, extra={"worker_id": self.options.worker_id})  # fmt: skip
        if committed is not None:
            return committed
        try:
            return (await consumer.earliest_offsets(tp)).get(tp) or 0
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors while the broker is away: no rewind this time
            _LOG.debug("no earliest offset of %s: %r", tp, exc)
            return offset

    async def _acked(self, event: Any, source: str, handle: Callable[[RawRecord], Awaitable[Outcome]]) -> None:  # noqa: ANN401
        record = _record(event)
        _HANDLING.set((TP(source, record.position.partition), event.message.generation_id))
        writes = collect_writes()
        try:
            self.check_owned()
            await self._handled(record, source, handle)
            if not await self._stored(record, source, writes):
                return  # not acknowledged: the committed offset stays before it
            self.check_owned()
        except PartitionRevoked:
            _LOG.info("record at %s of %s left to be read again after a rebalance", record.position, source)
            return  # not acknowledged: the new owner reads it again from the committed offset
        self._idle.finished((source, record.position.partition), time.monotonic())
        for finished in self._acks.finished(event.message.tp, event.message.generation_id, event.message.offset):
            finished.ack()

    @staticmethod
    async def _stored(record: RawRecord, source: str, writes: list[asyncio.Future[Any]]) -> bool:
        """Whether the table writes a record's handling made reached the changelog (before it may be acknowledged)."""
        try:
            await delivered(writes)
        except Exception:  # noqa: BLE001 - a changelog write faust could not deliver; may never succeed, so not taken for Kafka away
            _LOG.exception("record at %s of %s: its state could not be stored; it is handled again after a restart",
                           record.position, source)  # fmt: skip
            return False
        return True

    def idle_for(self, topic: str, partition: int) -> float:
        """Seconds since this member last finished a record of the partition, was assigned it or saw Kafka fail."""
        return self._idle.idle_for((topic, partition), time.monotonic())

    def check_owned(self) -> None:
        """Raises PartitionRevoked once the record this task handles belongs to another generation of the group.

        faust does not wait for records in flight when a rebalance revokes their partitions
        (stream_wait_empty off: a trigger waiting for its events, or a slow model, would hold the
        whole group's rebalance). A record fetched before a rebalance is stale even when its
        partition comes back to this member: the partition is read again from its committed offset,
        and the stale copy handled now would overtake the earlier records read again. So a handling
        checks before it waits, stores, publishes or acknowledges.
        """
        handling = _HANDLING.get()
        if handling is None:
            return
        tp, generation = handling
        consumer = self.app.consumer
        if generation != self.app.consumer_generation_id or tp not in consumer.assignment():
            raise PartitionRevoked(f"{tp.topic}[{tp.partition}] fetched in generation {generation}")

    async def _handled(self, record: RawRecord, source: str, handle: Callable[[RawRecord], Awaitable[Outcome]]) -> None:
        """Handles a record not published yet and publishes its outcome once; Kafka away is waited for."""
        published = await self._until_kafka_answers(functools.partial(self.blocking, self.publisher.published,
                                                                      source, record.position))  # fmt: skip
        if published:
            return  # a redelivery: its outcome is committed already
        outcome = await self._outcome(record, source, handle)
        if outcome.outputs:
            await self._publish(record, source, outcome.outputs)
        outcome.committed()

    async def _outcome(
        self, record: RawRecord, source: str, handle: Callable[[RawRecord], Awaitable[Outcome]]
    ) -> Outcome:
        """`handle(record)`: a failing model retried then dead-lettered, Kafka away waited for, the key service too.

        A key service that does not answer is waited for, with doubling pauses: without end for an
        event (a fold left out could never be made again), `key_service_wait_s` for a trigger, whose
        dead letter (`key-service-unavailable`) binds nothing: the trigger sent again is decided.
        """
        model_attempts = key_attempts = 0
        started = time.monotonic()
        while True:
            try:
                return await self._until_kafka_answers(functools.partial(handle, record))
            except RejectedError as exc:
                return await self._refused(record, source, exc)
            except PartitionRevoked:
                raise
            except ModelBackendError as exc:
                model_attempts += 1
                if model_attempts >= _MODEL_ATTEMPTS:
                    return await self._refused(record, source, RejectedError(Rejection.MODEL_ERROR, str(exc)))
                await asyncio.sleep(_RETRY_BACKOFF_S * model_attempts)
            except KeyServiceUnavailableError as exc:
                key_attempts += 1
                waited = time.monotonic() - started
                if waited >= self.options.key_service_wait_s and self.inputs.scope_of(source).is_triggers(source):
                    detail = f"the key service did not answer {key_attempts} attempts over {waited:.0f} s; last: {exc}"
                    return await self._refused(record, source, RejectedError(Rejection.KEY_SERVICE_UNAVAILABLE,
                                                                             detail))  # fmt: skip
                _LOG.warning("the key service failed (%s); record at %s of %s tried again", exc, record.position,
                             source)  # fmt: skip
                await asyncio.sleep(_key_service_pause(key_attempts))
            except KeyRevokedError as exc:
                return await self._refused(record, source, RejectedError(Rejection.KEY_REVOKED, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a bug must not stop the stream
                _LOG.exception("record at %s of %s broke the baseline", record.position, source)
                bug = RejectedError(Rejection.INTERNAL, f"{type(exc).__name__}: {exc}")
                return await self._refused(record, source, bug)

    async def _until_kafka_answers(self, work: Callable[[], Awaitable[_T]]) -> _T:
        """`await work()`, again and again with doubling pauses while Kafka fails: no record is at fault then."""
        backoff, waiting = 1.0, False
        try:
            while True:
                try:
                    return await work()
                except KafkaAdapterError as exc:
                    self._idle.kafka_failed(time.monotonic())
                    if not waiting:
                        waiting = True
                        self._waiting_for_kafka += 1
                    _LOG.warning("Kafka failed (%s); trying again in %.0f s", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(_MAX_BACKOFF_S, backoff * 2)
        finally:
            if waiting:
                self._waiting_for_kafka -= 1

    def waiting_for_kafka(self) -> bool:
        """Whether some record's handling is waiting for Kafka to answer right now (an outage, say)."""
        return self._waiting_for_kafka > 0

    async def _publish(self, record: RawRecord, source: str, outputs: Sequence[Output]) -> None:
        """Publishes `outputs` once; outputs Kafka keeps refusing give way to the dead letter, then to nothing.

        Nothing at all still commits the ledger's record: the record is handled, and no input holds its
        partition back.
        """
        too_large = oversized(outputs, self.options.max_record_bytes)
        if too_large is None and await self._published(record, source, outputs):
            return
        # Made only when needed: an event's dead letter is sealed, which may publish the case's data key.
        letter = await self._sealing(record, source, functools.partial(self.blocking, self._unpublishable, record,
                                                                       source, outputs, too_large))  # fmt: skip
        if not await self._published(record, source, [letter]):
            _LOG.error("record at %s of %s: neither its outputs nor its dead letter could be published",
                       record.position, source)  # fmt: skip
            await self._published(record, source, [])

    async def _published(self, record: RawRecord, source: str, stage: Sequence[Output]) -> bool:
        """Whether `stage` was published (with the ledger's record), within _PUBLISH_ATTEMPTS refusals."""
        for _ in range(_PUBLISH_ATTEMPTS):
            self.check_owned()
            try:
                await self._until_kafka_answers(functools.partial(self.blocking, self.publisher.publish, source,
                                                                  record.position, stage))  # fmt: skip
            except (OutputsRefusedError, PublishFailedError) as exc:
                _LOG.warning("outputs of the record at %s of %s refused: %s", record.position, source, exc)
                continue
            return True
        return False

    def _unpublishable(
        self, record: RawRecord, source: str, outputs: Sequence[Output], too_large: Output | None
    ) -> Output:
        """The dead letter that stands in for outputs Kafka will not take."""
        if too_large is not None:
            reason, detail = Rejection.OVERSIZE, f"an output to {too_large.topic} of {too_large.size()} bytes"
        else:
            reason, detail = Rejection.UNPUBLISHABLE, f"Kafka refused its {len(outputs)} output(s)"
        return self._dead_letter(record, source, reason, detail)

    async def _on_events(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        await self._consume(stream, self.folding.apply_event)

    async def _on_triggers(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        await self._consume(stream, self.deciding.decide)

    async def _on_keys(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        """A key tombstone or erased marker (the case or its tenant erased) drops everything kept for the case.

        The marker alone is what a member reads once the tombstone is compacted away.
        """
        async for event in stream.events():
            if event.message.key and erases(event.message.value):
                self.forget(event.message.key.decode("utf-8", "replace"))

    def forget(self, case_key: str) -> int:
        """Deletes the case's state, steps and decided triggers (tombstones on the changelogs); returns steps."""
        return self.folding.forget(case_key)


def _key_service_pause(attempts: int) -> float:
    """Seconds before asking a key service again after `attempts` failures: doubling, up to _MAX_BACKOFF_S."""
    return min(_MAX_BACKOFF_S, _RETRY_BACKOFF_S * 2.0 ** min(attempts - 1, 8))
