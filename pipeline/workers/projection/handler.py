"""The stateless projection worker: trigger in; view, decision and audit records out, in one transaction."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple, TypeVar

from cachetools import LRUCache

from pipeline.core.event_log import (
    EventLog,
    PositionOutOfRangeError,
    RawRecord,
    ReadDeadlineError,
    ReadResult,
    RecordId,
)
from pipeline.core.events import CaseRef, LogPosition, Trajectory
from pipeline.core.model import ModelBackend, ModelBackendError
from pipeline.core.prompt import PromptLayout
from pipeline.core.run import RunResult, run_dpm
from pipeline.core.task import Architecture, Budget
from pipeline.core.window import Window, WindowTooSmallError
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.processing.segment_views import SegmentViews
from pipeline.kafka.processing.steps import Deferred, Output, Step, run_inline
from pipeline.keys.providers import KeyRevokedError, KeyServiceUnavailableError
from pipeline.observability.metrics import PipelineMetrics
from pipeline.observability.tracing import PassThroughTracing, Tracing
from pipeline.wire.decision import PositionsSource, Provenance
from pipeline.wire.headers import Headers, trace_context
from pipeline.wire.limits import MAX_TRAJECTORY_CHARS
from pipeline.wire.record_keys import check_case_key, check_tenant_of_topic
from pipeline.wire.rejection import RETRYABLE, RejectedError, Rejection, decode_object
from pipeline.wire.run_records import run_records
from pipeline.wire.sealing import CaseCipher
from pipeline.wire.trajectory import assemble, own_records
from pipeline.wire.trigger import DecisionId, DecisionRequest, TriggerLimits
from pipeline.workers.publishing import dead_letter, observe_published, run_outputs

_LOG = logging.getLogger("pipeline.workers.projection")
# Decision ids this worker committed recently (about 100 bytes each): a trigger re-sent with the same
# id inside this window is dead-lettered `duplicate` instead of decided twice. Beyond it, or on
# another worker after a rebalance, readers keep the first decision per id (read_outputs).
RECENT_DECISIONS = 100_000
# Triggers whose last model failure is kept for their dead letter: those of the batch being retried, with room
# for records whose partition moved to another worker before their last attempt.
_MODEL_FAILURES_KEPT = 1_024


_Done = TypeVar("_Done", bound=Step)
_CONSUMED_AGAIN = RuntimeError("not committed: the batch is consumed again")


class _Projected(NamedTuple):
    """A trigger's run, and the segment views it computed (records for the segments topic)."""

    result: RunResult
    segment_views: list[Output]


@dataclass(frozen=True)
class CaseTopics:
    """Where a trigger's case is read and answered: its topics, its events, its case keys, its segment views.

    One for every tenant with the shared topics; one per tenant with tenancy by topic.
    """

    names: TopicNames
    log: EventLog
    cipher: CaseCipher | None = None
    segment_views: SegmentViews | None = None


class _CaseRead(NamedTuple):
    """A trigger's case as read: its trajectory, the positions it came from, who listed them, and its topics."""

    trajectory: Trajectory
    positions: tuple[LogPosition, ...]
    source: PositionsSource
    topics: CaseTopics


@dataclass
class ProjectionHandler:
    """Handles one trigger; holds no state between triggers (the log and backend are connections)."""

    names: TopicNames
    log: EventLog
    backend: ModelBackend
    worker_id: str
    max_trajectory_chars: int = MAX_TRAJECTORY_CHARS
    metrics: PipelineMetrics | None = None
    limits: TriggerLimits = field(default_factory=TriggerLimits)
    read_deadline_s: float = 30.0
    cipher: CaseCipher | None = None  # opens sealed events (and seals outputs when `seal` is on)
    seal: bool = False
    # Metric observations of handled records, made only once their outputs are committed: a batch
    # that is aborted or consumed again must not count twice.
    _on_commit: dict[RecordId, Callable[[], None]] = field(default_factory=dict, init=False, repr=False)
    recent_decisions: int = RECENT_DECISIONS
    # Spans of each trigger when tracing is on; either way its trace context goes on to its outputs.
    tracing: Tracing = field(default_factory=PassThroughTracing)
    # The model's window: a case longer than it is projected in segments (core/segments.py); None: never.
    window: Window | None = None
    # Where the projection prompts put the case's events (core/prompt.py); the decision record says which.
    layout: PromptLayout = PromptLayout.TASK_FIRST
    # Where segment views are kept for reuse by later decisions of the case; None: every view computed.
    segment_views: SegmentViews | None = None
    # Tenancy by topic: a tenant's own topics and readers, by tenant (the shared ones above are then unused).
    tenant_topics: Callable[[str], CaseTopics] | None = None
    # How long the loop retries a trigger whose tenant's key service does not answer (DPM_KEY_SERVICE_WAIT_S);
    # once one of its triggers was given up on, the tenant's next ones are refused at once for as long (below).
    key_service_wait_s: float = 30.0
    _key_service_away: dict[str, float] = field(default_factory=dict, init=False, repr=False)  # tenant -> until
    # Keyed by tenant too: one tenant's trigger ids never refuse another's.
    _decided: LRUCache[tuple[str, DecisionId], None] = field(init=False, repr=False)
    _deciding: dict[RecordId, tuple[str, DecisionId]] = field(default_factory=dict, init=False, repr=False)
    # Each retried trigger's last model failure (one line: cause, endpoint, fix), for the dead letter the loop
    # writes once it gives up. Written from the model-call threads, hence the lock.
    _model_failures: LRUCache[RecordId, str] = field(init=False, repr=False)
    _failures_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self._decided = LRUCache(maxsize=self.recent_decisions)
        self._model_failures = LRUCache(maxsize=_MODEL_FAILURES_KEPT)

    def committed(self, records: Sequence[RawRecord]) -> None:
        for record in records:
            observe = self._on_commit.get(record.where)
            if observe is not None:
                observe()
            decided = self._deciding.get(record.where)
            if decided is not None:
                self._decided[decided] = None
            self._last_model_failure(record)  # settled: decided or dead-lettered
        # What is left belongs to records consumed again: they will be handled again.
        self._on_commit.clear()
        self._deciding.clear()

    def handle(self, record: RawRecord) -> Sequence[Output]:
        """The outputs for `record`, its model calls made on this thread."""
        return run_inline(self.start(record))

    def start(self, record: RawRecord) -> Step:
        """Validates, claims and reads on the caller's thread; the model calls are deferred."""
        self._on_commit.pop(record.where, None)
        self._deciding.pop(record.where, None)
        return self._guarded(record, partial(self._prepare, record))

    def topics_of(self, record: RawRecord) -> CaseTopics:
        """The topics and readers of the record's tenant: the shared ones, or those of the tenant its topic names."""
        if self.tenant_topics is None:
            return CaseTopics(self.names, self.log, self.cipher, self.segment_views)
        tenant = self.names.tenant_of(record.topic or "")
        if tenant is None:  # the subscription pattern admits tenants' own topics only
            raise RejectedError(Rejection.SCHEMA, f"topic {record.topic} is not a tenant's own")
        return self.tenant_topics(tenant)

    def _prepare(self, record: RawRecord) -> Step:
        request = DecisionRequest.decode(record.value, limits=self.limits)
        check_case_key(record.key, request.case, "trigger")  # for every architecture: the baseline leaves it to us
        topics = self.topics_of(record)
        check_tenant_of_topic(topics.names.tenant, request.case)
        if Architecture.DPM not in request.architectures:
            return []
        self._refuse_while_key_service_away(request.case.tenant)
        self._claim((request.case.tenant, request.decision_id(Architecture.DPM)), record.where)
        trace = self.tracing.trigger(record.headers, {"dpm.decision_id": str(request.decision_id(Architecture.DPM)),
                                                      "dpm.tenant": request.case.tenant})  # fmt: skip
        try:
            self._refuse_if_erased(topics.cipher, request.case)
            with trace.span("dpm.read"):
                read = self._read(topics, request)
        except BaseException as exc:
            trace.end(exc)
            raise

        def slow() -> _Projected | Exception:
            try:
                with trace.span("dpm.project_and_decide"):
                    return self._project(topics, request, read.trajectory)
            except ModelBackendError as exc:  # retried by the loop: kept for the dead letter if it gives up
                self._model_failed(record, exc)
                trace.end(exc)
                raise
            except BaseException as exc:  # the batch is consumed again: this attempt's trace ends here
                trace.end(exc)
                raise

        def finish(result: _Projected | Exception) -> Sequence[Output]:
            try:
                with trace.span("dpm.publish"):
                    publish = partial(self._publish, request, record, read, result, trace.output_headers())
                    return self._guarded(record, publish)
            finally:
                trace.end()

        return Deferred(slow=slow, finish=finish, abandon=lambda: trace.end(_CONSUMED_AGAIN))

    def _guarded(self, record: RawRecord, work: Callable[[], _Done]) -> _Done | list[Output]:
        """`work`'s result; a rejection or a bug becomes this record's dead letter, retryable failures go out."""
        try:
            return work()
        except RejectedError as exc:
            _LOG.warning("trigger at %s rejected: %s", record.position, exc, extra={"worker_id": self.worker_id})
            return [self._refuse(record, exc.reason, exc.detail)]
        except ModelBackendError as exc:
            self._model_failed(record, exc)
            raise  # worth retrying: the loop consumes the batch again after a back-off
        except (KafkaAdapterError, KeyServiceUnavailableError):
            raise  # worth retrying, as a model failure is
        except KeyRevokedError as exc:  # the tenant's KEK is disabled at its service: refused until enabled
            _LOG.warning("trigger at %s refused: %s", record.position, exc, extra={"worker_id": self.worker_id})
            return [self._refuse(record, Rejection.KEY_REVOKED, str(exc))]
        except Exception as exc:  # noqa: BLE001 - a bug must not turn one trigger into a crash loop
            _LOG.exception("trigger at %s broke the handler", record.position, extra={"worker_id": self.worker_id})
            return [self._refuse(record, Rejection.INTERNAL, f"{type(exc).__name__}: {exc}")]

    def _claim(self, key: tuple[str, DecisionId], where: RecordId) -> None:
        """Refuses a decision id committed recently or taken by an earlier record of this batch."""
        if key in self._decided or key in self._deciding.values():
            raise RejectedError(Rejection.DUPLICATE, f"trigger {key[1].trigger_id!r} was decided already")
        self._deciding[where] = key

    def _refuse(self, record: RawRecord, reason: Rejection, detail: str) -> Output:
        if reason in RETRYABLE:  # binds nothing: the same trigger id sent again is decided, not a duplicate
            self._deciding.pop(record.where, None)
        metrics = self.metrics
        if metrics is not None:
            self._on_commit[record.where] = lambda: metrics.observe_rejection(reason)
        return self._dead_letter(record, reason, detail)

    def dead_letter(self, record: RawRecord, reason: Rejection, detail: str) -> Output:
        """The dead letter the loop writes for a record it gives up on; a model error's says the model's last failure.

        That failure is one line naming its cause, the endpoint and the fix (pipeline/llm/failures.py):
        the agent reads it as its refusal's detail, the operator in this worker's log.
        """
        cause = self._last_model_failure(record) if reason is Rejection.MODEL_ERROR else None
        if cause is not None:
            detail = f"{detail}: {cause}"
        if reason is Rejection.KEY_SERVICE_UNAVAILABLE:
            self._key_service_gave_up(record)
        _LOG.warning("trigger at %s dead-lettered %s: %s", record.position, reason.value, detail,
                     extra={"worker_id": self.worker_id})  # fmt: skip
        return self._refuse(record, reason, detail)

    def _refuse_while_key_service_away(self, tenant: str) -> None:
        """A tenant whose key service kept a trigger waiting its whole bound has its next ones refused at once.

        So one tenant's outage does not hold every tenant on the partition back a bound per trigger; the
        refusal is retryable, and once the bound has passed the next trigger asks the service again.
        """
        until = self._key_service_away.get(tenant)
        if until is None:
            return
        if time.monotonic() >= until:
            del self._key_service_away[tenant]
            return
        raise RejectedError(Rejection.KEY_SERVICE_UNAVAILABLE, f"tenant {tenant!r}'s key service did not answer "
                            "another trigger within its bound; asked again in at most "
                            f"{self.key_service_wait_s:g} s")  # fmt: skip

    def _key_service_gave_up(self, record: RawRecord) -> None:
        """Notes the tenant of a trigger the loop gave up on for its key service (a value that names none: nothing)."""
        try:
            tenant = decode_object(record.value, "trigger").get("tenant")
        except RejectedError:
            return
        if isinstance(tenant, str):
            self._key_service_away[tenant] = time.monotonic() + self.key_service_wait_s

    def _model_failed(self, record: RawRecord, exc: ModelBackendError) -> None:
        with self._failures_lock:
            self._model_failures[record.where] = str(exc)

    def _last_model_failure(self, record: RawRecord) -> str | None:
        """The record's last model failure, forgotten once asked: the record is settled."""
        with self._failures_lock:
            return self._model_failures.pop(record.where, None)

    def _dead_letter(self, record: RawRecord, reason: Rejection, detail: str) -> Output:
        # The record's tenant's own dead-letter topic (named, not opened: a refusal needs no readers),
        # else the shared one.
        tenant = self.names.tenant_of(record.topic or "") if self.tenant_topics is not None else None
        names = self.names.of_tenant(tenant) if tenant is not None else self.names
        letter = dead_letter(names, record, source_topic=record.topic or names.triggers, reason=reason, detail=detail,
                             worker_id=self.worker_id)  # fmt: skip
        return replace(letter, headers=(*letter.headers, *trace_context(record.headers)))

    @staticmethod
    def _refuse_if_erased(cipher: CaseCipher | None, case: CaseRef) -> None:
        """Refuses a trigger for an erased case (an erasure published before it is seen by it).

        Its events may still be stored, in clear if they were written so, until compaction removes them.
        """
        if cipher is None:
            return
        cipher.sync()
        if cipher.erased(case):
            raise RejectedError(Rejection.ERASED, f"{case.key}: its data key is destroyed")

    def _read(self, topics: CaseTopics, request: DecisionRequest) -> _CaseRead:
        deadline = time.monotonic() + self.read_deadline_s
        try:
            if request.positions is not None:
                read, source = topics.log.read(request.positions, deadline), PositionsSource.TRIGGER
            else:
                read, source = self._scan(topics, request.case, deadline), PositionsSource.SCAN
        except ReadDeadlineError as exc:
            raise RejectedError(Rejection.DEADLINE, f"{exc} (limit {self.read_deadline_s:g} s)") from exc
        except PositionOutOfRangeError as exc:
            raise RejectedError(Rejection.SCHEMA, str(exc)) from exc
        trajectory, positions = assemble(request.case, read, request.events_count, self.max_trajectory_chars,
                                         topics.cipher, topic_tenant=topics.names.tenant)  # fmt: skip
        return _CaseRead(trajectory, positions, source, topics)

    def _scan(self, topics: CaseTopics, case: CaseRef, deadline: float) -> ReadResult:
        """The case's own records found by a scan; a record keyed under the case whose value names another is left out.

        It is the baseline's to dead-letter (it folds every event once); here it is only logged, so it
        never blocks the case's decisions nor fills the dead-letter topic at every scan.
        """
        read, others = own_records(case, topics.log.scan(case, deadline))
        for record in others:
            _LOG.warning("%s at %s is keyed under %s but its value names another event: left out of the scan",
                         topics.names.events, record.position, case.key,
                         extra={"worker_id": self.worker_id})  # fmt: skip
        return read

    def _project(self, topics: CaseTopics, request: DecisionRequest, trajectory: Trajectory) -> _Projected | Exception:
        """The projection and the decision (the model calls; on a pool thread when the loop runs concurrently).

        A bug is returned rather than raised, so `finish` turns it into this trigger's dead letter.
        """
        store = None if topics.segment_views is None else topics.segment_views.for_case(request.case)
        try:
            result = run_dpm(trajectory, request.task, Budget(request.budget_chars), self.backend, window=self.window,
                             store=store, layout=self.layout)  # fmt: skip
            return _Projected(result, store.outputs() if store is not None else [])
        except (ModelBackendError, KafkaAdapterError, KeyServiceUnavailableError):
            raise
        except WindowTooSmallError as exc:  # the trigger's budget does not fit this model's window
            return RejectedError(Rejection.OVERSIZE, str(exc))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            return exc

    def _publish(
        self,
        request: DecisionRequest,
        record: RawRecord,
        read: _CaseRead,
        projected: _Projected | Exception,
        trace_context: Headers,
    ) -> list[Output]:
        if isinstance(projected, Exception):
            raise projected
        result = projected.result
        decision_id = request.decision_id(Architecture.DPM)
        provenance = Provenance(decision_id, read.positions, read.source, self.backend.name, self.worker_id,
                                read.topics.names.events)  # fmt: skip
        context = {"decision_id": str(decision_id), "tenant": request.case.tenant, "case_id": request.case.case_id,
                   "trace_id": request.trigger_id, "worker_id": self.worker_id}  # fmt: skip
        _LOG.info("decided %s: %s", decision_id, result.decision.label, extra=context)
        published = run_records(result, read.trajectory, task=request.task, budget=Budget(request.budget_chars),
                                provenance=provenance)  # fmt: skip
        metrics = self.metrics
        if metrics is not None:
            self._on_commit[record.where] = lambda: observe_published(metrics, result, published,
                                                                         triggered_ms=record.timestamp_ms)  # fmt: skip
        outputs = run_outputs(published, read.topics.names, read.topics.cipher if self.seal else None, trace_context)
        return [*outputs, *projected.segment_views]
