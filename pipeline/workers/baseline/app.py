"""The Summ-only baseline as its own consumer group, built with faust-streaming.

It consumes the events topic and makes one summarization call per event and maintained budget,
keeping each case's memory after every step in changelog-backed tables (a restarted worker
recovers them from the changelog). The task it summarizes for is the one the case's first event
declares (else the worker's default domain). On a trigger naming `summ` it makes the decision call
over the memory after the trigger's last event and publishes the view, the decision and the N+1
audit records to the same output topics as the projection workers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import orjson

from pipeline.core.domains import rules_for
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, Event, LogPosition, Trajectory
from pipeline.core.model import ModelBackend, ModelBackendError, ModelRequest, ModelResponse
from pipeline.core.run import ModelCall, RunResult, SummMemory, SummVariant, finish_summ, summ_step
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.transactions import Output
from pipeline.observability.metrics import PipelineMetrics
from pipeline.observability.tracing import trace_headers
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.event import EventRecord
from pipeline.wire.headers import header_pairs
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.run_records import run_records
from pipeline.wire.sealing import CaseCipher, open_state, seal_state
from pipeline.wire.trigger import DecisionRequest, TriggerLimits
from pipeline.workers.baseline.dispatch import CaseOrdered, ordering_key
from pipeline.workers.baseline.state import CaseState, HandledTriggers, SummStep, calls_of, load_steps, step_key
from pipeline.workers.publishing import dead_letter, observe_published, run_outputs

_LOG = logging.getLogger("pipeline.workers.baseline")
_MODEL_ATTEMPTS = 3
_RETRY_BACKOFF_S = 2.0
# A step's changelog record holds the event, the memory after it and the raw answer (the prompt is
# rebuilt from these when a decision is audited). Kafka refuses records over 1 MiB by default, so
# larger events are refused here, as dead letters, and a step over MAX_STEP_BYTES is never stored.
MAX_BASELINE_EVENT_BYTES = 256 * 1024
MAX_STEP_BYTES = 900 * 1024
# Triggers handled per case, newest last (HandledTriggers): a re-sent decided one is dead-lettered
# `duplicate`, once, and a redelivered record is skipped.
RECENT_TRIGGERS_PER_CASE = 64


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
    max_event_bytes: int = MAX_BASELINE_EVENT_BYTES
    concurrency: int = 8  # model calls in flight, each for a different case


def _record(event: Any) -> RawRecord:  # noqa: ANN401 - faust's EventT
    msg = event.message
    return RawRecord(
        LogPosition(msg.partition, msg.offset),
        msg.key,
        msg.value,
        int(msg.timestamp * 1000) if msg.timestamp else None,
        header_pairs(msg.headers),
    )


class Baseline:
    """The faust app; agents delegate to methods whose only state is in the changelog-backed tables."""

    def __init__(
        self,
        options: BaselineOptions,
        names: TopicNames,
        backend: ModelBackend,
        connection: Mapping[str, Any],
        metrics: PipelineMetrics | None = None,
        *,
        cipher: CaseCipher | None = None,
        seal: bool = False,
    ) -> None:
        self.options, self.names, self.backend, self.metrics = options, names, backend, metrics
        # Opens sealed events and state; seals outputs and state when `seal` (DPM_ENCRYPTION) is on.
        self.cipher, self.sealing = cipher, cipher if seal else None
        # The threads model calls run on: one per call in flight (cases run concurrently, see _consume).
        self.calls = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="summ-call")
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
            # Commit progress often: a restarted member then redoes little, and a trigger that arrived
            # while it was down is found at the committed position.
            broker_commit_interval=1.0,
        )
        self.outputs = {t: self._raw_topic(t) for t in (names.views, names.decisions, names.audit, names.dlq)}
        # case key -> CaseState.to_json(); step_key(case, budget, seq) -> SummStep.to_json()
        self.cases = self.app.Table("summ-cases", partitions=options.partitions)
        self.steps = self.app.Table("summ-steps", partitions=options.partitions)
        # Per case: its last RECENT_TRIGGERS_PER_CASE triggers decided or refused as duplicates, and where
        # each was read (HandledTriggers; only decide() writes it)
        self.decided = self.app.Table("summ-decided", partitions=options.partitions)
        self.app.agent(self._raw_topic(names.events), name="summ-events")(self._on_events)
        self.app.agent(self._raw_topic(names.triggers), name="summ-triggers")(self._on_triggers)
        self.app.agent(self._raw_topic(names.keys), name="summ-keys")(self._on_keys)
        if metrics is not None:
            self.app.timer(interval=5.0, name="summ-lag")(self._report_lag)

    async def _report_lag(self) -> None:
        """Exports this member's lag on the events and triggers topics (highwater minus position)."""
        if self.metrics is None:
            return
        consumer = self.app.consumer
        for topic in (self.names.events, self.names.triggers):
            lags = {}
            for tp in consumer.assignment():
                if tp.topic == topic:
                    position = await consumer.position(tp)
                    highwater = consumer.highwater(tp)
                    if position is not None and highwater is not None and highwater >= 0:
                        lags[tp.partition] = max(0, highwater - position)
            self.metrics.observe_lag(self.app.conf.id, topic, lags)

    def _raw_topic(self, name: str) -> Any:  # noqa: ANN401 - faust's TopicT
        return self.app.topic(
            name, internal=False, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    async def _send(self, outputs: Sequence[Output]) -> None:
        for out in outputs:
            await self.outputs[out.topic].send(key=out.key, value=out.value, headers=list(out.headers))

    async def _reject(self, record: RawRecord, source: str, exc: RejectedError) -> None:
        _LOG.warning("record at %s of %s rejected: %s", record.position, source, exc,
                     extra={"worker_id": self.options.worker_id})  # fmt: skip
        if self.metrics is not None:
            self.metrics.observe_rejection(exc.reason)
        await self._send(
            [
                dead_letter(
                    self.names,
                    record,
                    source_topic=source,
                    reason=exc.reason,
                    detail=exc.detail,
                    worker_id=self.options.worker_id,
                )
            ]
        )

    async def _consume(self, stream: Any, source: str, handle: Callable[[RawRecord], Awaitable[object]]) -> None:  # noqa: ANN401
        """Feeds each record of a faust stream to `handle`, cases concurrently; refused input becomes a dead letter.

        A record is acknowledged once handled. Acknowledgements may come out of order, and faust
        commits a partition only up to its first unacknowledged offset, so a crash redoes work
        rather than losing it (a step already stored is skipped).
        """
        cases = CaseOrdered(pending=4 * self.options.concurrency)
        try:
            async for event in stream.noack().events():
                # The task copies this context: table writes go to the changelog partition of `event`.
                work = functools.partial(self._acked, event, source, handle)
                await cases.submit(ordering_key(event.message.key), work)
        except asyncio.CancelledError:  # stopping: a model call in flight is not waited for
            cases.cancel()
            raise
        await cases.drain()

    async def _acked(self, event: Any, source: str, handle: Callable[[RawRecord], Awaitable[object]]) -> None:  # noqa: ANN401
        await self._handled(_record(event), source, handle)
        event.ack()

    async def _handled(self, record: RawRecord, source: str, handle: Callable[[RawRecord], Awaitable[object]]) -> None:
        for attempt in range(1, _MODEL_ATTEMPTS + 1):
            try:
                await handle(record)
            except RejectedError as exc:
                await self._reject(record, source, exc)
            except ModelBackendError as exc:
                if attempt < _MODEL_ATTEMPTS:
                    await asyncio.sleep(_RETRY_BACKOFF_S * attempt)
                    continue
                await self._reject(record, source, RejectedError(Rejection.MODEL_ERROR, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a bug must not stop the stream
                _LOG.exception("record at %s of %s broke the baseline", record.position, source)
                await self._reject(record, source, RejectedError(Rejection.INTERNAL, f"{type(exc).__name__}: {exc}"))
            return

    async def _on_events(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        await self._consume(stream, self.names.events, self.apply_event)

    def _default_task(self) -> TaskSpec:
        rules = rules_for(self.options.default_domain)
        if rules is None:
            return TaskSpec(self.options.default_domain, "Decide the case.", ("APPROVE", "DENY"))
        return TaskSpec(rules.domain, rules.task, rules.label_space)

    def _case_state(self, record: EventRecord) -> CaseState:
        event = record.event
        stored = self.cases.get(event.case.key)
        if stored is not None:
            return CaseState.from_json(stored)
        opening = record.opening if event.seq == 1 else None
        task = opening.task if opening else self._default_task()
        budgets = sorted({*self.options.budgets, *(opening.summ_budgets if opening else ())})
        return CaseState(task, tuple(budgets))

    async def apply_event(self, record: RawRecord) -> None:
        """One Summ-only step per maintained budget; a re-sent event is skipped, a gap refused."""
        size = len(record.value or b"")
        if size > self.options.max_event_bytes:
            limit = self.options.max_event_bytes
            raise RejectedError(Rejection.OVERSIZE, f"event of {size} bytes exceeds the baseline's {limit}")
        decoded = EventRecord.decode(record.value, cipher=self.cipher)
        event = decoded.event
        state = self._case_state(decoded)
        if event.seq <= state.last_seq:
            return
        if event.seq != state.last_seq + 1:
            raise RejectedError(Rejection.SEQUENCE_GAP, f"{event.case.key}: seq {event.seq} after {state.last_seq}")
        for budget in state.budgets:
            await self._step(record, event, state.task, budget)
        self.cases[event.case.key] = state.after(event.seq).to_json()

    async def _step(self, record: RawRecord, event: Event, task: TaskSpec, budget: int) -> None:
        case_key = event.case.key
        previous = (
            SummStep.memory_of(self._stored_step(event.case, step_key(case_key, budget, event.seq - 1)))
            if event.seq > 1
            else SummMemory(EMPTY_VIEW)
        )
        calls: list[ModelCall] = []

        def call(request: ModelRequest) -> ModelResponse:
            response = self.backend.complete(request)
            calls.append(ModelCall(request, response))
            return response

        step = functools.partial(
            summ_step,
            previous,
            event.seq,
            event,
            task=task,
            budget=Budget(budget),
            variant=self.options.variant,
            call=call,
        )
        memory = await asyncio.get_running_loop().run_in_executor(self.calls, step)
        slot = step_key(case_key, budget, event.seq)
        stored = seal_state(event.case, SummStep(event, record.position, memory, tuple(calls)).to_json(),
                            self.sealing, slot)  # fmt: skip
        size = len(orjson.dumps(stored))
        if size > MAX_STEP_BYTES:  # never hand the changelog a record it would refuse
            raise RejectedError(Rejection.OVERSIZE, f"{case_key} step {event.seq} would store {size} bytes")
        self.steps[slot] = stored
        if self.metrics is not None:
            self.metrics.observe_calls(Architecture.SUMM, calls)

    def _stored_step(self, case: CaseRef, slot: str) -> dict[str, Any]:
        """One stored step, opened; raises CaseErasedError once the case's data key is destroyed."""
        opened: dict[str, Any] = open_state(case, self.steps[slot], self.cipher, slot)
        return opened

    async def _on_keys(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        """A key tombstone (the case or its tenant erased) drops everything kept for the case."""
        async for event in stream.events():
            if event.message.value is None and event.message.key:
                self.forget(event.message.key.decode("utf-8", "replace"))

    def forget(self, case_key: str) -> int:
        """Deletes the case's state, steps and decided triggers (tombstones on the changelogs); returns steps."""
        stored = self.cases.pop(case_key, None)
        self.decided.pop(case_key, None)
        if stored is None:
            return 0
        state = CaseState.from_json(stored)
        slots = [step_key(case_key, b, seq) for b in state.budgets for seq in range(1, state.last_seq + 1)]
        for slot in slots:
            self.steps.pop(slot, None)
        _LOG.info("forgot erased case %s (%d steps)", case_key, len(slots), extra={"worker_id": self.options.worker_id})
        return len(slots)

    async def _on_triggers(self, stream: Any) -> None:  # noqa: ANN401 - faust's StreamT
        await self._consume(stream, self.names.triggers, self.decide)

    async def decide(self, record: RawRecord) -> RunResult | None:
        """The decision over the memory after the trigger's last event, published with N+1 audit records.

        A trigger that does not decode is the projection group's to dead-letter (it reads every
        trigger): one dead letter per bad trigger, not one per group.
        """
        try:
            request = DecisionRequest.decode(record.value, limits=self.options.limits)
        except RejectedError as exc:
            _LOG.debug("trigger at %s left to the projection group: %s", record.position, exc)
            return None
        if Architecture.SUMM not in request.architectures:
            return None
        handled = HandledTriggers.from_json(self.decided.get(request.case.key))
        if handled.handled_at(record.position):
            return None  # the same record delivered again (at-least-once): decided or refused already
        if handled.decided(request.trigger_id):
            duplicate = RejectedError(Rejection.DUPLICATE, f"trigger {request.trigger_id!r} was decided already")
            await self._reject(record, self.names.triggers, duplicate)
            self._remember(request, handled, record.position, refused=True)
            return None
        count, state = await self._await_steps(request)
        budgets = state.budgets
        if request.budget_chars not in budgets:
            raise RejectedError(
                Rejection.UNKNOWN_CASE,
                f"{request.case.key}: no Summ-only memory at {request.budget_chars} characters "
                f"(maintained: {list(budgets)}); declare it in the case's first event",
            )
        budget = Budget(request.budget_chars)
        if self.cipher is not None:
            self.cipher.sync()  # an erasure published before this trigger is seen by it
        stored = [self._stored_step(request.case, step_key(request.case.key, request.budget_chars, s))
                  for s in range(1, count + 1)]  # fmt: skip
        steps = load_steps(stored, task=state.task, budget=budget)  # the task the steps summarized for
        trajectory = Trajectory(request.case, tuple(s.event for s in steps))
        calls = calls_of(steps)
        decide = functools.partial(finish_summ, trajectory, request.task, budget, self.backend, steps[-1].memory,
                                   calls=calls, variant=self.options.variant)  # fmt: skip
        result = await asyncio.get_running_loop().run_in_executor(self.calls, decide)
        positions = tuple(s.position for s in steps)
        provenance = Provenance(request.decision_id(Architecture.SUMM), positions, PositionsSource.TRIGGER,
                                self.backend.name, self.options.worker_id)  # fmt: skip
        published = run_records(result, trajectory, task=request.task, budget=budget, provenance=provenance)
        # The trigger's trace context goes on to the outputs as it came (the baseline makes no spans).
        await self._send(run_outputs(published, self.names, self.sealing, trace_headers(record.headers)))
        self._remember(request, handled, record.position, refused=False)
        if self.metrics is not None:  # the N steps were counted as they ran
            observe_published(self.metrics, result, published, triggered_ms=record.timestamp_ms,
                              calls_counted_already=len(calls))  # fmt: skip
        _LOG.info("decided %s: %s", provenance.decision_id, result.decision.label,
                  extra={"decision_id": str(provenance.decision_id), "tenant": request.case.tenant,
                         "case_id": request.case.case_id, "trace_id": request.trigger_id,
                         "worker_id": self.options.worker_id})  # fmt: skip
        return result

    def _remember(
        self, request: DecisionRequest, handled: HandledTriggers, position: LogPosition, *, refused: bool
    ) -> None:
        """Adds the trigger read at `position` to its case's handled triggers (the last RECENT_TRIGGERS_PER_CASE)."""
        added = handled.add(request.trigger_id, position, refused=refused, keep=RECENT_TRIGGERS_PER_CASE)
        self.decided[request.case.key] = added.to_json()

    async def _await_steps(self, request: DecisionRequest) -> tuple[int, CaseState]:
        """Waits until the case's memory covers the trigger's events; returns that count and the case's state."""
        deadline = time.monotonic() + self.options.trigger_wait_s
        wanted = request.events_count or (len(request.positions) if request.positions else None)
        while True:
            stored = self.cases.get(request.case.key)
            state = CaseState.from_json(stored) if stored is not None else None
            have = state.last_seq if state is not None else 0
            if state is not None and have and (wanted is None or have >= wanted):
                return wanted or have, state
            if time.monotonic() > deadline:
                reason = Rejection.UNKNOWN_CASE if have == 0 else Rejection.SEQUENCE_GAP
                raise RejectedError(reason, f"{request.case.key}: {have} events summarized, trigger needs {wanted}")
            await asyncio.sleep(0.2)
