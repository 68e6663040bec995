"""AsyncDecisionMemory: the client library for asyncio agents (LangGraph, the OpenAI Agents SDK, MCP servers).

Appends, reads and the preparing of a request run on the client's own threads (librdkafka calls
block; asyncio's default pool has min(32, cores + 4) threads, six here, which fifty agents
appending at once would queue behind). A request in flight and a waiting `decide` hold no thread:
each awaits a future the client's trigger producer or its one replies reader completes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

from pipeline.client.errors import ClientError, DecisionNotFoundError
from pipeline.client.memory import (
    APPEND_FAILURES,
    CONNECT_TIMEOUT_S,
    DEFAULT_BUDGET_CHARS,
    DecisionMemory,
    OpenedRequest,
    reading_errors,
)
from pipeline.client.results import Contest, Decision, EventPosition, Explanation
from pipeline.config.settings import Settings
from pipeline.core.contest import AdverseReasons
from pipeline.core.events import CaseRef
from pipeline.core.task import TaskSpec
from pipeline.core.verification import ReplayReport
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.kafka.writing.case_writer import READ_TIMEOUT_S
from pipeline.kafka.writing.sequencer import ANSWER_GRACE_S, KnownCase, unanswered
from pipeline.services.contest import DEFAULT_MAX_CALLS

_T = TypeVar("_T")
_LOG = logging.getLogger("pipeline.client.aio")
THREADS = 32  # blocking calls (appends, reads) a client runs side by side


class AsyncDecisionMemory:
    """DecisionMemory's calls as coroutines; see DecisionMemory for what each does and raises."""

    def __init__(self, tenant: str, *, settings: Settings | None = None,
                 threads: int = THREADS, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:  # fmt: skip
        self.sync = DecisionMemory(tenant, settings=settings, connect_timeout=connect_timeout)
        self.tenant = tenant
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix=f"dpm-client-{tenant}")

    async def _run(self, call: Callable[..., _T], /, *args: object, **kwargs: object) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(call, *args, **kwargs))

    async def _here_or_run(self, here: bool, call: Callable[..., _T], /, *args: object, **kwargs: object) -> _T:
        """`call` on the loop when `here` (it would wait on nothing), else on one of the client's threads."""
        return call(*args, **kwargs) if here else await self._run(call, *args, **kwargs)

    async def __aenter__(self) -> AsyncDecisionMemory:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:  # fmt: skip
        await self.close()

    async def append(self, case_id: str, *, kind: str, text: str, idempotency_key: str | None = None,
                     expected_seq: int | None = None, timeout: float = 60.0) -> EventPosition:  # fmt: skip
        return await self._run(self.sync.append, case_id, kind=kind, text=text, idempotency_key=idempotency_key,
                               expected_seq=expected_seq, timeout=timeout)  # fmt: skip

    async def append_many(
        self, case_id: str, events: Iterable[tuple[str, str]], *, idempotency_key: str | None = None,
        expected_seq: int | None = None, timeout: float = 60.0,
    ) -> list[EventPosition]:  # fmt: skip
        opened = self.sync.open_append(case_id, events, idempotency_key=idempotency_key, expected_seq=expected_seq)
        if not opened.items:
            return []
        try:
            # On a thread only the first time: the key topic's first reading
            await self._here_or_run(self.sync.erasures_known, self.sync.refuse_erased, opened.case, timeout)
            with self.sync.appending(opened):
                # Waited for on the loop: a thread held per append capped the appends in flight at THREADS.
                # Queued on a thread when a first use of the partition asks the cluster (its topics, its sequencer).
                ready = self.sync.sequencer_ready(opened.case)
                answer = await self._here_or_run(ready, self.sync.append_soon, opened, timeout)
                done = await _answer(answer, timeout, opened.case)
        except APPEND_FAILURES as exc:
            raise self.sync.append_failure(opened.case, exc) from exc
        return self.sync.appended(opened, done)

    async def partition_of(self, case_id: str) -> tuple[str, int]:
        known = self.sync.known_partition_of(case_id)  # a door asks on every append: no thread hop when known
        return known if known is not None else await self._run(self.sync.partition_of, case_id)

    async def decide(self, case_id: str, *, domain: str | None = None, task: TaskSpec | None = None,
                     budget: int = DEFAULT_BUDGET_CHARS, architecture: str = "dpm", timeout: float = 60.0,
                     idempotency_key: str | None = None) -> Decision:  # fmt: skip
        decision_id = await self.request(case_id, domain=domain, task=task, budget=budget, architecture=architecture,
                                         idempotency_key=idempotency_key, timeout=timeout)  # fmt: skip
        return await self.wait(decision_id, timeout)

    async def request(self, case_id: str, *, domain: str | None = None, task: TaskSpec | None = None,
                      budget: int = DEFAULT_BUDGET_CHARS, architecture: str = "dpm",
                      idempotency_key: str | None = None, timeout: float = 60.0) -> str:  # fmt: skip
        with self.sync.requesting(case_id, idempotency_key):
            # On a thread the first time (the key topic and the replies' ends are read), then on the loop
            opened = await self._here_or_run(self.sync.requests_ready, self.sync.open_request, case_id, domain=domain,
                                             task=task, budget=budget, architecture=architecture,
                                             idempotency_key=idempotency_key, timeout=timeout)  # fmt: skip
            prepared = self.sync.ready_request(opened, await self._known(opened, timeout))
            if prepared.sent_before and await self._run(self.sync.look_up, prepared.decision_id):
                return str(prepared.decision_id)  # a retry: its decision (or refusal) is published or on its way
            # Shielded: a timeout here must not cancel the request's future, which its delivery report completes.
            sent = asyncio.shield(asyncio.wrap_future(self.sync.send_request(prepared.request)))
            try:
                await asyncio.wait_for(sent, timeout)
            except TimeoutError:
                raise self.sync.unconfirmed(prepared, timeout) from None
            except KafkaAdapterError as exc:
                raise self.sync.unsent(prepared, exc) from exc
        return str(prepared.decision_id)

    async def _known(self, opened: OpenedRequest, timeout: float) -> KnownCase:
        """The case's head, waited for on the loop: a thread held per request capped requests at once at THREADS."""
        with reading_errors("the case's events (nothing was requested)"):
            # Queued on a thread when a first use of the partition asks the cluster, as an append is
            answer = await self._here_or_run(self.sync.sequencer_ready(opened.case), self.sync.known_soon, opened,
                                             timeout)  # fmt: skip
            return await _answer(answer, min(timeout, READ_TIMEOUT_S), opened.case)

    async def wait(self, decision_id: str, timeout: float = 60.0) -> Decision:
        # Shielded: a timeout here must not cancel the future other calls for the same id wait on.
        waiting = asyncio.shield(asyncio.wrap_future(self.sync.reply_future(decision_id)))
        try:
            reply = await asyncio.wait_for(waiting, timeout)
        except TimeoutError:
            self.sync.stop_waiting(decision_id)
            raise await self._run(self.sync.not_in_time, decision_id, timeout) from None
        typed = self.sync.typed_now(reply)  # on the loop when no event must be read, else on a thread
        return typed if typed is not None else await self._run(self.sync.typed, reply)

    async def decision(self, decision_id: str) -> Decision:
        return await self._run(self.sync.decision, decision_id)

    async def collect(self, decision_id: str, wait_s: float) -> Decision:
        """A published decision; else, with `wait_s` > 0, the one asked for and not in yet, waited for.

        Raises DecisionNotFoundError (none published, no wait), DecisionTimeoutError, DecisionRefusedError.
        """
        try:
            return await self.decision(decision_id)
        except DecisionNotFoundError:
            if wait_s <= 0:
                raise
        return await self.wait(decision_id, wait_s)

    async def explain(self, decision_id: str) -> Explanation:
        return await self._run(self.sync.explain, decision_id)

    async def replay(self, decision_id: str, *, backend: str | None = None) -> ReplayReport:
        return await self._run(self.sync.replay, decision_id, backend=backend)

    async def reasons(self, decision_id: str, *, max_calls: int = DEFAULT_MAX_CALLS) -> AdverseReasons:
        return await self._run(self.sync.reasons, decision_id, max_calls=max_calls)

    async def contests(self, decision_id: str) -> list[Contest]:
        return await self._run(self.sync.contests, decision_id)

    async def decisions_of(self, case_id: str, *, after: str | None = None, limit: int | None = None) -> list[str]:
        return await self._run(self.sync.decisions_of, case_id, after=after, limit=limit)

    async def close(self) -> None:
        await self._run(self.sync.close)
        self._threads.shutdown(wait=False)


class TenantMemories:
    """Each tenant's client in one process (the HTTP API's, the MCP server's), made on the tenant's first call.

    Tenants are made side by side: one tenant's first call, waiting up to `connect_timeout` for a
    cluster that does not answer, holds no other tenant's. A failed making is not kept (the next
    call tries again); calls for a tenant being made share its making.
    """

    def __init__(self, settings: Settings, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        self._settings, self._connect_timeout = settings, connect_timeout
        self._made: dict[str, AsyncDecisionMemory] = {}
        self._making: dict[str, asyncio.Future[AsyncDecisionMemory]] = {}

    async def __call__(self, tenant: str) -> AsyncDecisionMemory:
        made = self._made.get(tenant)
        if made is not None:
            return made
        making = self._making.get(tenant)
        if making is None:  # no await between the look and the set: one making per tenant on this loop
            making = self._making[tenant] = asyncio.ensure_future(asyncio.to_thread(self._make, tenant))
            making.add_done_callback(functools.partial(self._settle, tenant))
        return await asyncio.shield(making)

    def _make(self, tenant: str) -> AsyncDecisionMemory:
        """The tenant's client, its lookup index kept current (a door answers lookups of what was just decided)."""
        memory = AsyncDecisionMemory(tenant, settings=self._settings, connect_timeout=self._connect_timeout)
        try:
            memory.sync.keep_index_current()
        except ClientError as exc:  # lookups still work: each catches up on a miss
            _LOG.warning("the lookup index of tenant %s is not kept current: %s", tenant, exc)
        return memory

    def _settle(self, tenant: str, making: asyncio.Future[AsyncDecisionMemory]) -> None:
        self._making.pop(tenant, None)
        if not making.cancelled() and making.exception() is None:
            self._made[tenant] = making.result()

    def forget_erased(self, tenant: str, case_id: str) -> None:
        """A case this process erased: the tenant's client, if made, drops what it kept of it (in the same step)."""
        made = self._made.get(tenant)
        if made is not None:
            made.sync.forget_erased(case_id)

    async def close(self) -> None:
        for memory in self._made.values():
            await memory.close()
        self._made.clear()


async def _answer(answer: Future[_T], timeout_s: float, case: CaseRef) -> _T:
    """A sequencer's answer, waited for on the loop no longer than it is ever given (then `unanswered`).

    Shielded: a caller gone (a timeout, a closed connection) must not cancel the future, which the
    sequencer's thread completes.
    """
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(answer)), timeout_s + ANSWER_GRACE_S)
    except TimeoutError:
        raise unanswered(case, timeout_s) from None
