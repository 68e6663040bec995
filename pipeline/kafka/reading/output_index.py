"""The lookup index of what the workers published: kept current from the output topics, read by offset.

One index file per set of output topics (the shared ones, or a tenant's own) under
`<DPM_HOME>/index`, named by the decisions topic's id, so a topic made again under its name starts
a file of its own. `catch_up` reads what was published since the file was last brought up to date
(by this process or any other on the host) and stores it with the offsets it read to. A lookup
reads the file, then only the records at their places: its cost does not grow with the topics.

Order of reading, which is what lets a lookup trust an entry: the decisions topic's ends are
taken first, then views, audit records, dead letters and contests are read to their ends, then
decisions up to the ends taken first. A decision is committed with its view and audit records in
one transaction, so a decision indexed has its view and audit records indexed in the same SQLite
transaction or an earlier one, unless another producer's transaction still open on the view's
partition holds that partition's stable end below it (the DPM and Summ-only workers write the same
partitions). Such an entry is incomplete: lookups and lists pass it by until a later catch-up
reads its view. A decision committed meanwhile waits for the next catch-up.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson
from confluent_kafka import KafkaException

from pipeline.core.event_log import RawRecord
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError, NotAuthorizedError
from pipeline.kafka.local_stores import StoreRebuiltError
from pipeline.kafka.reading.follow import TopicFollower
from pipeline.kafka.reading.index_store import Chunk, ContestEntry, Entry, IndexStore, place
from pipeline.kafka.reading.places import Place, PlaceReader
from pipeline.wire.dead_letter import refused_trigger
from pipeline.wire.headers import TENANT_HEADER
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.sealing import SEALED

_LOG = logging.getLogger("pipeline.kafka.reading.output_index")
_CHUNK = 20_000  # rows written per SQLite transaction while catching up (memory stays bounded)

KEEP_CURRENT_S = 1.0  # how often a door's index reads what was published (a lookup of a newer id catches up itself)
_KEEPERS: dict[Path, OutputIndex] = {}  # the index that keeps each file current in this process
_KEEPERS_LOCK = threading.Lock()


class CatchUpReport(Protocol):
    """Told how a catch-up goes, in offsets of the output topics (records and transaction markers).

    What a command shows while an index is built or rebuilt (pipeline/cli/index_progress.py).
    """

    def begun(self, backlog: int, path: Path) -> None:
        """A catch-up of `backlog` offsets into the file at `path` begins (called before any is read)."""

    def advanced(self, done: int) -> None:
        """`done` of the backlog's offsets are read and stored."""

    def ended(self) -> None:
        """The catch-up ended (read to its ends, stopped, or failed)."""


@dataclass(frozen=True)
class CaughtUp:
    """What a catch-up read: records, and the decisions among them."""

    records: int
    decisions: int


def _header(raw: RawRecord, name: str) -> str | None:
    for key, value in raw.headers:
        if key == name:
            return value.decode("utf-8", "replace")
    return None


def _clear_fields(raw: RawRecord) -> dict[str, object]:
    """The record's JSON object (its clear fields, and `sealed` if sealed); {} for a value that is none."""
    try:
        body = orjson.loads(raw.value or b"")
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


class OutputIndex:
    """The index of one set of output topics (`names`), in `directory`. Thread-safe.

    Its records are read through `reader` when given (shared with the case keys' reads: one
    connection less to open; its owner closes it), else through its own. Its catch-ups are told to
    `report` when given (a command's progress bar).
    """

    def __init__(
        self,
        client_config: dict[str, str],
        names: TopicNames,
        directory: Path,
        reader: PlaceReader | None = None,
        report: CatchUpReport | None = None,
    ) -> None:
        self.names = names
        self._config = client_config
        self._reader, self._owns_reader = reader or PlaceReader(client_config), reader is None
        try:
            identity = self._reader.facts.topic_id(names.decisions)
        except KafkaAdapterError as exc:  # its own reader holds no connection yet (made on first read)
            raise KafkaAdapterError(f"the output topics of {names.scope} cannot be indexed: {exc}") from exc
        self.store = IndexStore(IndexStore.file(directory, names.decisions, identity))
        self._catching_up = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        # When the last whole catch-up began: lookups that missed while it ran wait for it, not run their own.
        self._covered_from = -math.inf
        self._contests_refused = False
        self._report = report

    # -- keeping it current ------------------------------------------------------------------------------

    def catch_up(self, *, contests_only: bool = False) -> CaughtUp:
        """Indexes what was published since the file was last brought up to date; returns what it read.

        `contests_only`: the contests topic alone (what a decision's contests need; nothing else
        depends on it). Raises KafkaAdapterError when the topics cannot be read (what was indexed
        before stays).
        """
        topics = (self.names.contests,) if contests_only else self._topics()
        asked = time.monotonic()
        with self._catching_up:
            if not contests_only and self._covered_from >= asked:
                return CaughtUp(0, 0)  # one that began after this was asked has read all it could have
            began = time.monotonic()
            try:
                caught = self._caught_up(topics)
            except StoreRebuiltError:  # the file was damaged and started anew: read everything into it
                caught = self._caught_up(topics)
            if not contests_only:
                self._covered_from = began
            return caught

    def _caught_up(self, topics: tuple[str, ...]) -> CaughtUp:
        followers = {topic: TopicFollower(self._config, topic, self.store.read_to(topic)) for topic in topics}
        try:
            return self._catch_up(followers)
        except KafkaException as exc:
            raise KafkaAdapterError(f"indexing {self.names.scope} outputs failed: {exc}") from exc
        finally:
            for follower in followers.values():
                follower.close()

    def keep_current(self, interval_s: float = KEEP_CURRENT_S) -> None:
        """Catches up every `interval_s` from a thread of its own until closed (a long-running door's index).

        One keeper per index file in a process (another index of the same file keeps it already: nothing
        to do), so a door serving many tenants on shared topics reads the topics once, not once per tenant.
        A failed catch-up is logged and tried again at the next interval; lookups still catch up on a miss.
        """
        with _KEEPERS_LOCK:
            if self._keeper is not None or self.store.path in _KEEPERS:
                return
            _KEEPERS[self.store.path] = self
            self._keeper = threading.Thread(target=self._keep, args=(interval_s,), name="dpm-index-keeper",
                                            daemon=True)  # fmt: skip
        self._keeper.start()

    def _keep(self, interval_s: float) -> None:
        failing = False
        while not self._stop.wait(interval_s):
            try:
                self.catch_up()
                failing = False
            except KafkaAdapterError as exc:  # LocalStoreError too (a store file busy or unwritable)
                if not failing:  # once per outage, not once a second
                    _LOG.warning("keeping the lookup index of %s current failed (tried again every %g s): %s",
                                 self.names.scope, interval_s, exc)  # fmt: skip
                failing = True

    def _topics(self) -> tuple[str, ...]:
        """The topics in the order they are read: decisions last (see the module's docstring)."""
        names = self.names
        return (names.views, names.audit, names.dlq, names.contests, names.decisions)

    def _catch_up(self, followers: Mapping[str, TopicFollower]) -> CaughtUp:
        ends = self._ends(followers)
        started = {topic: followers[topic].positions() for topic in ends}
        report = self._report
        if report is not None:
            report.begun(_offsets_between(started, ends), self.store.path)
        try:
            return self._read_to(followers, ends, started)
        finally:
            if report is not None:
                report.ended()

    def _ends(self, followers: Mapping[str, TopicFollower]) -> dict[str, dict[int, int]]:
        """Each topic's ends, the decisions topic's first (see the module's docstring); none for refused contests."""
        ends = {}
        for topic in (self.names.decisions, *(t for t in followers if t != self.names.decisions)):
            if topic in followers:
                try:
                    ends[topic] = followers[topic].ends()
                except NotAuthorizedError as exc:
                    if topic != self.names.contests:
                        raise
                    self._no_contests(exc)  # a principal not granted the contests: its decisions are found all the same
        return {topic: ends[topic] for topic in followers if topic in ends}  # read in the followers' order

    def _read_to(self, followers: Mapping[str, TopicFollower], ends: Mapping[str, Mapping[int, int]],
                 started: Mapping[str, Mapping[int, int]]) -> CaughtUp:  # fmt: skip
        """Reads every topic of `ends` up to them, a chunk of rows at a time, telling the report after each."""
        chunk, read, decided = Chunk(), 0, 0
        for topic, topic_ends in ends.items():
            try:
                for raw in followers[topic].new_records(topic_ends):
                    read += 1
                    decided += self._add(chunk, topic, raw)
                    if len(chunk) >= _CHUNK:
                        self._write(chunk, followers)
                        chunk = Chunk()
                        self._advanced(followers, started)
                        if self._stop.is_set():  # closing: what is written stands, the rest waits for the next one
                            return CaughtUp(read, decided)
            except NotAuthorizedError as exc:
                if topic != self.names.contests:
                    raise
                self._no_contests(exc)
            self._write(chunk, followers)
            chunk = Chunk()
            self._advanced(followers, started)
        return CaughtUp(read, decided)

    def _advanced(self, followers: Mapping[str, TopicFollower], started: Mapping[str, Mapping[int, int]]) -> None:
        if self._report is not None:
            self._report.advanced(_offsets_between(started, {t: followers[t].positions() for t in started}))

    def _no_contests(self, exc: NotAuthorizedError) -> None:
        if not self._contests_refused:  # once: a keeper would say it every second
            _LOG.warning("contests are not indexed: %s; decisions are. Apply the principal's plan again "
                         "(`dpm acl plan`): it reads the contests topic, which every door lists", exc)  # fmt: skip
        self._contests_refused = True

    def _write(self, chunk: Chunk, followers: Mapping[str, TopicFollower]) -> None:
        read_to = {(topic, p): offset for topic, f in followers.items() for p, offset in f.positions().items()}
        self.store.apply(chunk, read_to)

    def _add(self, chunk: Chunk, topic: str, raw: RawRecord) -> int:
        """Adds one record's row to `chunk`; 1 when it is a decision. A record that is not ours is skipped."""
        where = place(raw.position.partition, raw.position.offset)
        names = self.names
        if raw.value is None:
            return 0  # not a record the workers or auditors write
        if topic == names.dlq:
            refused = refused_trigger(raw.value, names.is_triggers)
            if refused is not None:
                chunk.refusals.append((refused.trigger_id, refused.tenant, where))
            return 0
        if topic == names.contests:
            self._add_contest(chunk, raw, where)
            return 0
        decision_id = (raw.key or b"").decode("utf-8", "replace")
        if topic == names.decisions:
            body = _clear_fields(raw)
            tenant, case_id = body.get("tenant"), body.get("case_id")
            if not isinstance(tenant, str) or not isinstance(case_id, str) or body.get("decision_id") != decision_id:
                _LOG.warning("a record at %s %s is no decision the index can place", topic, raw.position)
                return 0
            outcome = body.get("decision") if SEALED not in body else None
            label = outcome.get("label") if isinstance(outcome, dict) else None
            chunk.decisions.append((decision_id, tenant, case_id, raw.timestamp_ms or 0, where,
                                    label if isinstance(label, str) else None))  # fmt: skip
            return 1
        tenant = _header(raw, TENANT_HEADER)
        if tenant is None:  # no header (a record from another writer): its clear fields say
            claimed = _clear_fields(raw).get("tenant")
            tenant = claimed if isinstance(claimed, str) else None
        if tenant is None or not decision_id:
            _LOG.warning("a record at %s %s names no tenant or decision id", topic, raw.position)
        elif topic == names.views:
            chunk.views.append((decision_id, tenant, where))
        else:
            call_index = _call_index(raw)
            if call_index is not None:
                chunk.audit(decision_id, tenant, call_index, where)
        return 0

    def _add_contest(self, chunk: Chunk, raw: RawRecord, where: int) -> None:
        body = _clear_fields(raw)
        tenant, contest_id = body.get("tenant"), body.get("contest_id")
        if not isinstance(tenant, str) or not isinstance(contest_id, str):
            return
        schema = body.get("schema")
        if schema == SchemaId.CONTEST_PART.value and isinstance(body.get("part"), int):
            chunk.parts.append((tenant, contest_id, int(str(body["part"])), where))
        elif schema in (SchemaId.CONTEST.value, SchemaId.CONTEST_V1.value):
            decision_id, case_id = body.get("decision_id"), body.get("case_id")
            if isinstance(decision_id, str) and isinstance(case_id, str):
                chunk.contests.append((decision_id, tenant, contest_id, case_id, raw.timestamp_ms or 0, where))

    # -- lookups -------------------------------------------------------------------------------------------

    def entries(self, decision_id: str, tenant: str | None) -> list[Entry]:
        """The complete entries of a decision id (of `tenant`, or any), caught up first if none is complete."""
        found = [e for e in self.store.entries(decision_id, tenant) if e.complete or e.erased]
        if found:
            return found
        self.catch_up()
        return [e for e in self.store.entries(decision_id, tenant) if e.complete or e.erased]

    def refusal(self, trigger_id: str, tenant: str) -> RawRecord | None:
        """The dead letter that refused the tenant's trigger (as far as indexed), read at its place."""
        where = self.store.refusal(trigger_id, tenant)
        if where is None:
            return None
        return self.read([(self.names.dlq, where)]).get((self.names.dlq, where))

    def contests(self, decision_id: str, tenant: str) -> list[ContestEntry]:
        """The contests of a tenant's decision, caught up first (a contest is asked for by a person, now)."""
        self.catch_up(contests_only=True)
        return self.store.contests(decision_id, tenant)

    def read(self, places: Iterable[Place]) -> dict[Place, RawRecord]:
        """The records at `places` (see PlaceReader.read). Raises KafkaAdapterError."""
        return self._reader.read(places)

    def mark_erased(self, tenant: str, case_ids: Sequence[str]) -> int:
        """Marks the cases' entries erased (the erasure destroyed their key: nothing of them opens again)."""
        return self.store.mark_erased(tenant, case_ids)

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=30)
            with _KEEPERS_LOCK:
                _KEEPERS.pop(self.store.path, None)
        if self._owns_reader:
            self._reader.close()
        self.store.close()


def _call_index(raw: RawRecord) -> int | None:
    """An audit record's call index: its CloudEvents id ends `/audit/<n>`; else its clear field."""
    event_id = _header(raw, "ce_id")
    if event_id is not None and "/audit/" in event_id:
        tail = event_id.rsplit("/audit/", 1)[1]
        if tail.isdigit():
            return int(tail)
    call_index = _clear_fields(raw).get("call_index")
    return call_index if isinstance(call_index, int) else None


def _offsets_between(first: Mapping[str, Mapping[int, int]], last: Mapping[str, Mapping[int, int]]) -> int:
    """The offsets from `first` (positions; 0 for a partition not read yet) to `last`, over every topic."""
    return sum(max(0, offset - first[topic].get(p, 0)) for topic, ends in last.items() for p, offset in ends.items())
