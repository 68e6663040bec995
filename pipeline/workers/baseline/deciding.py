"""Summ-only's decision online: the decision call over the running summary after a trigger's last event."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING

from pipeline.core.event_log import RawRecord
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.run import RunResult, finish_summ
from pipeline.core.task import Architecture, Budget
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.headers import trace_context
from pipeline.wire.record_keys import check_case_key, check_partition, check_tenant_of_topic
from pipeline.wire.rejection import RejectedError, Rejection
from pipeline.wire.run_records import RunRecords, run_records
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trigger import DecisionRequest
from pipeline.workers.baseline.outcome import Outcome
from pipeline.workers.baseline.state import CaseState, HandledTriggers, calls_of, load_steps, step_key, window_of
from pipeline.workers.publishing import observe_published, run_outputs

if TYPE_CHECKING:
    from pipeline.workers.baseline.app import Baseline

_LOG = logging.getLogger("pipeline.workers.baseline")
# Triggers handled per case, newest last (HandledTriggers): a re-sent decided one is dead-lettered
# `duplicate`, once.
RECENT_TRIGGERS_PER_CASE = 64
_POLL_S = 0.2  # how often a trigger waiting for its events looks at the case's state


class Deciding:
    """Decides `summ` triggers from the case's stored steps; every Kafka and key operation runs off the event loop."""

    def __init__(self, host: Baseline, cipher: CaseCipher | None, seal: bool) -> None:
        self.host, self.cipher = host, cipher
        self.sealing = cipher if seal else None  # seals the outputs when DPM_ENCRYPTION is on

    def _request(self, record: RawRecord) -> DecisionRequest | None:
        """The trigger's request if it is one for Summ-only; None for what the projection group refuses or owns.

        A trigger that does not decode, or whose key names another case, is the projection group's
        to dead-letter (it reads every trigger): one dead letter per bad trigger, not one per group.
        """
        try:
            request = DecisionRequest.decode(record.value, limits=self.host.options.limits)
            check_case_key(record.key, request.case, "trigger")
            check_tenant_of_topic(self.host.inputs.tenant_of(record.topic or ""), request.case)
        except RejectedError as exc:
            _LOG.debug("trigger at %s left to the projection group: %s", record.position, exc)
            return None
        return request if Architecture.SUMM in request.architectures else None

    def _erased(self, case: CaseRef) -> bool:
        """On the I/O thread: whether the key topic erased the case (an erasure before this trigger is seen)."""
        if self.cipher is None:
            return False
        self.cipher.sync()
        return self.cipher.erased(case)

    async def decide(self, record: RawRecord) -> Outcome:
        """The decision over the memory after the trigger's last event, with N+1 audit records."""
        request = self._request(record)
        if request is None:
            return Outcome()
        case = request.case
        # The baseline keeps a case's summaries with its partition: a trigger filed elsewhere cannot be served.
        check_partition(record.position.partition, case, self.host.case_partition(case))
        if await self.host.blocking(self._erased, case):
            raise RejectedError(Rejection.ERASED, f"{case.key}: its data key is destroyed")
        handled = HandledTriggers.from_json(self.host.decided.get(case.key))
        if handled.decided(request.trigger_id):
            duplicate = RejectedError(Rejection.DUPLICATE, f"trigger {request.trigger_id!r} was decided already")
            refusal = self.host.refusal(record, record.topic or self.host.inputs.scope(case.tenant).triggers, duplicate)

            def refused() -> None:
                refusal.committed()
                self._remember(request, record.position, refused=True)

            return Outcome(refusal.outputs, refused)
        count, state = await self._await_steps(request)
        self._check_decidable(request, state, count)
        published, result = await self._run(request, state, count)
        outputs = await self.host.blocking(run_outputs, published, self.host.inputs.scope(case.tenant), self.sealing,
                                           trace_context(record.headers))  # fmt: skip
        return Outcome(outputs, functools.partial(self._decided, request, record, published, result))

    @staticmethod
    def _check_decidable(request: DecisionRequest, state: CaseState, count: int) -> None:
        """Refuses a trigger whose summary is of text the log no longer holds, or at a budget not maintained."""
        rewritten = [s for s in state.rewritten if s <= count]
        if rewritten:
            raise RejectedError(
                Rejection.SUPERSEDED,
                f"{request.case.key}: event(s) {rewritten} were rewritten after Summ-only folded them; its running "
                "summary holds their old text and cannot unfold it",
            )
        if request.budget_chars not in state.budgets:
            raise RejectedError(
                Rejection.UNKNOWN_CASE,
                f"{request.case.key}: no Summ-only memory at {request.budget_chars} characters "
                f"(maintained: {list(state.budgets)}); declare it in the case's first event",
            )

    async def _run(self, request: DecisionRequest, state: CaseState, count: int) -> tuple[RunRecords, RunResult]:
        case, budget = request.case, Budget(request.budget_chars)
        stored = [await self.host.folding.stored_step(case, step_key(case.key, request.budget_chars, s))
                  for s in range(1, count + 1)]  # fmt: skip
        counter = self.host.window.counter if self.host.window is not None else None
        steps = load_steps(stored, task=state.task, budget=budget, counter=counter)  # the task they summarized for
        trajectory = Trajectory(case, tuple(s.event for s in steps))
        decide = functools.partial(finish_summ, trajectory, request.task, budget, self.host.backend, steps[-1].memory,
                                   calls=calls_of(steps), variant=self.host.options.variant,
                                   window=window_of(steps))  # fmt: skip
        result = await self.host.model(decide)
        positions = tuple(s.position for s in steps)
        provenance = Provenance(request.decision_id(Architecture.SUMM), positions, PositionsSource.TRIGGER,
                                self.host.backend.name, self.host.options.worker_id,
                                self.host.events_of(case).topic)  # fmt: skip
        return run_records(result, trajectory, task=request.task, budget=budget, provenance=provenance), result

    def _decided(self, request: DecisionRequest, record: RawRecord, published: RunRecords, result: RunResult) -> None:
        """Once the decision is committed: remembered (a re-sent id is a duplicate), counted, logged."""
        self._remember(request, record.position, refused=False)
        metrics = self.host.metrics
        if metrics is not None:  # the N steps were counted as they ran
            observe_published(metrics, result, published, triggered_ms=record.timestamp_ms,
                              calls_counted_already=len(result.calls) - 1)  # fmt: skip
        decision_id = published.decision_id
        _LOG.info("decided %s: %s", decision_id, result.decision.label,
                  extra={"decision_id": str(decision_id), "tenant": request.case.tenant,
                         "case_id": request.case.case_id, "trace_id": request.trigger_id,
                         "worker_id": self.host.options.worker_id})  # fmt: skip

    def _remember(self, request: DecisionRequest, position: LogPosition, *, refused: bool) -> None:
        """Adds the trigger read at `position` to its case's handled triggers (the last RECENT_TRIGGERS_PER_CASE)."""
        handled = HandledTriggers.from_json(self.host.decided.get(request.case.key))
        added = handled.add(request.trigger_id, position, refused=refused, keep=RECENT_TRIGGERS_PER_CASE)
        self.host.decided[request.case.key] = added.to_json()

    async def _await_steps(self, request: DecisionRequest) -> tuple[int, CaseState]:
        """Waits until the case's memory covers the trigger's events; returns that count and the case's state.

        The wait is bounded by --trigger-wait, but its clock stops while Kafka does not answer (an
        outage holds the events back, and no event is missing then), and it goes on while the events
        the trigger names exist and are still on their way: not fetched yet, or fetched and queued
        behind other records of a partition whose summarizing has not stalled (a backlog, a
        restarted member). Given up on, a case whose events stopped folding because its tenant's key
        was revoked is refused key-revoked (reading its key says so), not as a gap.
        """
        deadline = time.monotonic() + self.host.options.trigger_wait_s
        wanted = request.events_count or (len(request.positions) if request.positions else None)
        last = self._last_offset(request)
        while True:
            stored = self.host.cases.get(request.case.key)
            state = CaseState.from_json(stored) if stored is not None else None
            have = state.last_seq if state is not None else 0
            if state is not None and have and (wanted is None or have >= wanted):
                return wanted or have, state
            self.host.check_owned()
            if time.monotonic() > deadline and not await self._still_arriving(request.case, last):
                await self.host.blocking(self._refuse_revoked, request.case)
                reason = Rejection.UNKNOWN_CASE if have == 0 else Rejection.SEQUENCE_GAP
                raise RejectedError(reason, f"{request.case.key}: {have} events summarized, trigger needs {wanted}")
            await asyncio.sleep(_POLL_S)
            if self.host.waiting_for_kafka():
                deadline += _POLL_S

    def _refuse_revoked(self, case: CaseRef) -> None:
        """On the I/O thread: KeyRevokedError when the case's key no longer opens (its events were left unfolded)."""
        if self.cipher is not None:
            self.cipher.opens(case)  # reads the case's key only: never makes one

    def _last_offset(self, request: DecisionRequest) -> int | None:
        """The last offset the trigger names in its case's events partition."""
        partition = self.host.events_of(request.case).partition
        return max((p.offset for p in request.positions or () if p.partition == partition), default=None)

    async def _still_arriving(self, case: CaseRef, last: int | None) -> bool:
        """Whether the events up to offset `last` exist and this member is still on its way to them.

        Kafka away counts as arriving (what exists cannot be asked); an offset never written does
        not, nor does a partition whose summarizing finished nothing for --trigger-wait seconds
        (time Kafka was away is not counted: idle_for).
        """
        if last is None:
            return False
        events = self.host.events_of(case)
        end = await self.host.events_end(events)
        if end is not None and last >= end:
            return False
        position = await self.host.events_position(events)
        if position is None:
            return end is None
        if position <= last:
            return True
        return self.host.idle_for(events.topic, events.partition) < self.host.options.trigger_wait_s
