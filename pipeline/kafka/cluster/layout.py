"""The layout topic on the cluster: which generation of the case-partitioned topics every process uses.

Every process that reads or writes by case partition (producers, projection workers, the
baseline) resolves its topic names here at start and refuses to run when a topic's partition
count differs from the one its layout records; running workers and baseline members watch the
layout and stop when it changes (a growth made a new generation, or someone altered a count), so
that a supervisor restarts them on the current generation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.admin import topic_exists
from pipeline.kafka.cluster.topics import TopicNames, partition_counts
from pipeline.kafka.errors import KafkaAdapterError, NotAuthorizedError
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.kafka.writing.one_record import produce_one
from pipeline.wire.headers import standard_headers
from pipeline.wire.layout import Layout, partition_problems
from pipeline.wire.rejection import RejectedError
from pipeline.wire.schema_ids import SchemaId
from pipeline.wire.validation import SchemaError

_LOG = logging.getLogger("pipeline.kafka.cluster.layout")
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
WATCH_INTERVAL_S = 15.0


class LayoutError(DpmError):
    """The case-partitioned topics do not match their recorded layout (or the layout cannot be used)."""


def read_layout(client_config: dict[str, str], names: TopicNames, wait_s: float = 30.0) -> Layout | None:
    """The scope's latest layout record; None when its layout topic or record does not exist (before any growth).

    A cluster that fails to answer (a leader moving, a broker just back) is asked again for up to `wait_s`.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _read_layout(client_config, names)
        except NotAuthorizedError:
            raise  # no ACL: asking again changes nothing
        except KafkaAdapterError as exc:
            if time.monotonic() >= deadline:
                raise
            _LOG.info("the layout could not be read yet (%s); asking again", exc)
            time.sleep(1.0)


def _read_layout(client_config: dict[str, str], names: TopicNames) -> Layout | None:
    if not topic_exists(client_config, names.layout):
        return None
    latest: Layout | None = None
    key = names.scope.encode()
    for record in read_topic(client_config, names.layout):
        if record.key != key:
            continue
        try:
            latest = None if record.value is None else Layout.decode(record.value)
        except (RejectedError, SchemaError) as exc:
            raise LayoutError(f"{names.layout} holds an unreadable layout record: {exc}") from exc
    return latest


def write_layout(client_config: dict[str, str], names: TopicNames, layout: Layout) -> None:
    """Stores `layout` as the scope's current one (waits until the broker has it)."""
    headers = standard_headers(SchemaId.LAYOUT, source="/dpm/topics", tenant=None,
                               event_id=f"{layout.scope}g{layout.generation}")  # fmt: skip
    produce_one(client_config, names.layout, layout.key, layout.encode(), headers)


def _unrecorded_problems(names: TopicNames, counts: dict[str, int]) -> list[str]:
    """Without a layout record: the case-partitioned topics that exist must at least agree with each other."""
    found = {topic: counts[topic] for topic in names.case_partitioned() if topic in counts}
    if len(set(found.values())) <= 1:
        return []
    listed = ", ".join(f"{topic} {count}" for topic, count in found.items())
    return [f"the topics partitioned by case have different partition counts ({listed}): partitions were changed "
            "outside `dpm topics grow` (kafka-topics --alter?), which moves cases to other partitions"]  # fmt: skip


def current_names(client_config: dict[str, str], names: TopicNames) -> tuple[TopicNames, Layout | None]:
    """The scope's topics in their current generation, and its layout; LayoutError when they break it."""
    layout = read_layout(client_config, names)
    counts = partition_counts(client_config)
    if layout is None:
        problems = _unrecorded_problems(names, counts)
        current = names.of_generation(1)
    else:
        current = names.of_generation(layout.generation)
        found = {topic: counts.get(topic) for topic in current.case_partitioned()}
        if found[current.segments] is None:
            del found[current.segments]  # topics made before segment views existed: no views are kept then
        problems = partition_problems(layout, found)
    if problems:
        raise LayoutError("; ".join(problems) + ". See docs/how-to/upgrade.md (dpm topics grow).")
    return current, layout


def recorded_layout(client_config: dict[str, str], names: TopicNames) -> Layout:
    """The scope's layout, recorded first for generation 1 (with its events topic's count) if nothing was yet.

    Pipelines made before layouts existed get theirs here, from `dpm topics create` or a growth,
    once their counts are known to agree.
    """
    current, layout = current_names(client_config, names)
    if layout is not None:
        return layout
    counts = partition_counts(client_config)
    if current.events not in counts:
        raise DpmError(f"{current.events} does not exist: run `dpm topics create`")
    first = Layout(names.scope, 1, counts[current.events])
    write_layout(client_config, names, first)
    return first


def pipeline_names(settings: Settings) -> TopicNames:
    """The topics a producer, worker or baseline member uses: the current generation, its counts checked.

    With tenancy by topic each tenant's own topics are used as created (their growth is not supported yet).
    """
    names = TopicNames(settings.kafka.topic_prefix)
    if settings.kafka.tenancy == "topics":
        return names
    return current_names(settings.kafka.client_config(), names)[0]


def current_generation(client_config: dict[str, str], names: TopicNames) -> TopicNames:
    """The scope's topics in their current generation, for readers: counts are not checked (see current_names)."""
    layout = read_layout(client_config, names)
    return names.of_generation(1 if layout is None else layout.generation)


class LayoutWatch:
    """Looks at the layout every `interval_s` on its own thread; calls `changed(reason)` once when it no longer holds.

    It no longer holds when another generation became current or a topic's partition count changed.
    A look that fails (the broker away) is tried again at the next interval, never taken for a change.
    """

    def __init__(self, client_config: dict[str, str], names: TopicNames, changed: Callable[[str], None],
                 interval_s: float = WATCH_INTERVAL_S) -> None:  # fmt: skip
        self._config, self._names, self._changed, self._interval_s = client_config, names, changed, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="layout-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def look(self) -> str | None:
        """Why the layout no longer holds for these names, or None while it does (or cannot be read now)."""
        base = self._names.of_generation(1)
        try:
            current, _ = current_names(self._config, base)
        except LayoutError as exc:
            return str(exc)
        except KafkaAdapterError as exc:
            _LOG.debug("the layout could not be read this time: %s", exc)
            return None
        if current.generation != self._names.generation:
            return (f"generation {current.generation} of {base.scope}* is current now (this process uses "
                    f"generation {self._names.generation}): restart it to follow the growth")  # fmt: skip
        return None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            reason = self.look()
            if reason is not None:
                _LOG.error("the topic layout changed: %s", reason)
                self._changed(reason)
                return
