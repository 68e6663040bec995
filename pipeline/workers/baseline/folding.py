"""Summ-only's update operator online: each event folded into each maintained budget's running summary."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.core.domains import domain_task
from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, Event
from pipeline.core.model import ModelRequest, ModelResponse
from pipeline.core.run import ModelCall, SummMemory, folded_in_parts, summ_step
from pipeline.core.task import Architecture, Budget, TaskSpec
from pipeline.core.view import EMPTY_VIEW
from pipeline.wire.event import EventRecord
from pipeline.wire.record_keys import check_event_key, check_partition, check_tenant_of_topic, claimed_case
from pipeline.wire.rejection import RejectedError, Rejection, decode_object
from pipeline.wire.sealing import CaseCipher, open_body, open_state, seal_state
from pipeline.workers.baseline.outcome import Outcome
from pipeline.workers.baseline.state import CaseState, SummStep, step_key

if TYPE_CHECKING:
    from pipeline.workers.baseline.app import Baseline

_LOG = logging.getLogger("pipeline.workers.baseline")
# A step's changelog record holds the event, the memory after it and the raw answer (the prompt is
# rebuilt from these when a decision is audited). Kafka refuses records over 1 MiB by default, so
# larger events are refused here, as dead letters, and a step over MAX_STEP_BYTES is never stored.
MAX_BASELINE_EVENT_BYTES = 256 * 1024
MAX_STEP_BYTES = 900 * 1024


class Folding:
    """Applies events to the baseline's tables; every Kafka and key operation runs off the event loop."""

    def __init__(self, host: Baseline, cipher: CaseCipher | None, seal: bool) -> None:
        self.host, self.cipher = host, cipher
        self.sealing = cipher if seal else None  # seals stored steps when DPM_ENCRYPTION is on

    def _case_state(self, record: EventRecord) -> CaseState:
        event = record.event
        stored = self.host.cases.get(event.case.key)
        if stored is not None:
            return CaseState.from_json(stored)
        opening = record.opening if event.seq == 1 else None
        task = opening.task if opening else domain_task(self.host.options.default_domain)
        budgets = sorted({*self.host.options.budgets, *(opening.summ_budgets if opening else ())})
        return CaseState(task, tuple(budgets))

    def _decode(self, record: RawRecord) -> EventRecord:
        """The event a record holds, refused unless its key, value and partition agree."""
        size = len(record.value or b"")
        limit = self.host.options.max_event_bytes
        if size > limit:
            raise RejectedError(Rejection.OVERSIZE, f"event of {size} bytes exceeds the baseline's {limit}")
        body = decode_object(record.value, "event")
        claimed = claimed_case(body)  # None: left to the decode, which refuses it (SCHEMA)
        if claimed is not None:  # whose it is, before any key opens it: the topic's tenant
            check_tenant_of_topic(self.host.inputs.tenant_of(record.topic or ""), claimed)
        decoded = EventRecord.from_wire(open_body(body, self.cipher))
        check_event_key(record.key, decoded.event)
        check_partition(record.position.partition, decoded.event.case, self.host.case_partition(decoded.event.case))
        return decoded

    async def apply_event(self, record: RawRecord) -> Outcome:
        """One Summ-only step per maintained budget; a re-sent event is skipped (noted if rewritten), a gap refused."""
        if record.value is None:
            return Outcome()  # an event's erasure tombstone: the key topic's tombstone forgets the case
        decoded = await self.host.blocking(self._decode, record)
        event = decoded.event
        state = self._case_state(decoded)
        if event.seq <= state.last_seq:
            await self._check_resent(state, event)
            return Outcome()
        if event.seq != state.last_seq + 1:
            raise await self._gap(event, state.last_seq)
        for budget in state.budgets:
            await self._step(record, event, state.task, budget)
        self.host.check_owned()
        self.host.cases[event.case.key] = state.after(event.seq).to_json()
        return Outcome()

    async def _gap(self, event: Event, last_seq: int) -> RejectedError:
        """The refusal of an event that does not follow the case's last folded one.

        A case forgotten because it was erased has no state, so an event of it read again (a
        rebalance hands its partition over before the offsets were committed) looks like a gap: when
        the case's data key is destroyed by now, it is refused as erased. The event itself may have
        opened with a key this member had not yet learnt was destroyed.
        """
        if self.cipher is not None and await self.host.blocking(_erased_by_now, self.cipher, event.case):
            return RejectedError(Rejection.ERASED, f"{event.case.key}: its data key is destroyed")
        return RejectedError(Rejection.SEQUENCE_GAP, f"{event.case.key}: seq {event.seq} after {last_seq}")

    async def _check_resent(self, state: CaseState, event: Event) -> None:
        """An event sent again: the same content is a retry; other content is noted, as the summary cannot unfold it."""
        if event.seq in state.rewritten:
            return
        slot = step_key(event.case.key, state.budgets[0], event.seq)
        stored = await self.stored_step(event.case, slot)
        folded = EventRecord.from_wire(stored["event"]).event
        if (folded.kind, folded.text) != (event.kind, event.text):
            _LOG.warning("event %s was rewritten after Summ-only folded it: the case is no longer decided", event.key)
            self.host.check_owned()
            self.host.cases[event.case.key] = state.with_rewritten(event.seq).to_json()

    async def _step(self, record: RawRecord, event: Event, task: TaskSpec, budget: int) -> None:
        case_key = event.case.key
        previous = SummMemory(EMPTY_VIEW)
        if event.seq > 1:
            stored = await self.stored_step(event.case, step_key(case_key, budget, event.seq - 1))
            previous = SummStep.memory_of(stored)
        calls: list[ModelCall] = []

        def call(request: ModelRequest) -> ModelResponse:
            response = self.host.backend.complete(request)
            calls.append(ModelCall(request, response))
            return response

        window = self.host.window
        step = functools.partial(summ_step, previous, event.seq, event, task=task, budget=Budget(budget),
                                 variant=self.host.options.variant, call=call, window=window)  # fmt: skip
        memory = await self.host.model(step)
        slot = step_key(case_key, budget, event.seq)
        stored_window = window if folded_in_parts(len(calls)) else None
        value = SummStep(event, record.position, memory, tuple(calls), stored_window).to_json()
        stored = await self.host.blocking(seal_state, event.case, value, self.sealing, slot)
        size = len(orjson.dumps(stored))
        if size > MAX_STEP_BYTES:  # never hand the changelog a record it would refuse
            raise RejectedError(Rejection.OVERSIZE, f"{case_key} step {event.seq} would store {size} bytes")
        self.host.check_owned()
        self.host.steps[slot] = stored
        if self.host.metrics is not None:
            self.host.metrics.observe_calls(Architecture.SUMM, calls)

    async def stored_step(self, case: CaseRef, slot: str) -> dict[str, Any]:
        """One stored step, opened on the I/O thread; raises CaseErasedError once the case's data key is destroyed.

        The table is read here, on the event loop: faust's tables belong to it.
        """
        opened: dict[str, Any] = await self.host.blocking(open_state, case, self.host.steps[slot], self.cipher, slot)
        return opened

    def forget(self, case_key: str) -> int:
        """Deletes the case's state, steps and decided triggers (tombstones on the changelogs); returns steps."""
        stored = self.host.cases.pop(case_key, None)
        self.host.decided.pop(case_key, None)
        if stored is None:
            return 0
        state = CaseState.from_json(stored)
        slots = [step_key(case_key, b, seq) for b in state.budgets for seq in range(1, state.last_seq + 1)]
        for slot in slots:
            self.host.steps.pop(slot, None)
        _LOG.info("forgot erased case %s (%d steps)", case_key, len(slots),
                  extra={"worker_id": self.host.options.worker_id})  # fmt: skip
        return len(slots)


def _erased_by_now(cipher: CaseCipher, case: CaseRef) -> bool:
    """Whether the case's data key is destroyed, as the keys topic says now (blocking: it reads the topic)."""
    cipher.sync()
    return cipher.erased(case)
