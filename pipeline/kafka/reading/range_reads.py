"""Reads whole topics to their current end (read_committed): output inspection, compare and replay."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.core.event_log import RawRecord
from pipeline.core.events import LogPosition
from pipeline.kafka.cluster.admin import reader_group, topic_partitions
from pipeline.kafka.errors import KafkaAdapterError
from pipeline.wire.headers import header_pairs

_LOG = logging.getLogger("pipeline.kafka.librdkafka")


def read_topic(client_config: dict[str, str], topic: str, timeout_s: float = 30.0) -> Iterator[RawRecord]:
    """Every committed record of `topic` up to the end it had when called, partition by partition."""
    consumer = Consumer(
        {**client_config, "group.id": reader_group("dump"), "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 5},
        logger=_LOG,
    )  # fmt: skip
    try:
        partitions = range(topic_partitions(client_config, topic))  # DescribeTopics: see admin._described
        lows, highs = earliest_offsets(consumer, topic, partitions), latest_offsets(consumer, topic, partitions)
        for partition in partitions:
            low, high = lows[partition], highs[partition]
            if high > low:
                yield from read_range(consumer, topic, partition, low, last=high - 1, timeout_s=timeout_s)
    except KafkaException as exc:
        raise KafkaAdapterError(f"reading {topic} failed: {exc}") from exc
    finally:
        consumer.close()


def latest_offsets(consumer: Consumer, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's end as the consumer sees it, in one ListOffsets request per leader.

    The last stable offset for a read_committed consumer, the high watermark otherwise (what
    `get_watermark_offsets` gives one partition at a time). Preferred to it for a consumer that sat
    idle since it was made: its first `get_watermark_offsets` waited about 45 ms (measured on
    loopback), this a few. Raises KafkaException, with the first failed partition's error.
    """
    return _listed_offsets(consumer, topic, partitions, OFFSET_END)


def earliest_offsets(consumer: Consumer, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's first offset (the log's start), as `latest_offsets` asks for ends."""
    return _listed_offsets(consumer, topic, partitions, OFFSET_BEGINNING)


def _listed_offsets(consumer: Consumer, topic: str, partitions: Iterable[int], spec: int) -> dict[int, int]:
    """The offsets `spec` names, asked again for up to LEADER_WAIT_S while a partition has no leader to answer.

    A partition just created, or whose broker is just back, has none for a moment: not a failure.
    Unlike `get_watermark_offsets`, `offsets_for_times` answers at once with the partition's error
    then (a broker's restart had a reader fail the moment it came back).
    """
    asked = [TopicPartition(topic, p, spec) for p in partitions]
    deadline = time.monotonic() + LEADER_WAIT_S
    while True:
        failed: KafkaError | None
        try:
            answered = consumer.offsets_for_times(asked, timeout=10)
        except KafkaException as exc:
            answered, failed = [], exc.args[0]
        else:
            failed = next((tp.error for tp in answered if tp.error is not None), None)
        if failed is None:
            return {tp.partition: int(tp.offset) for tp in answered}
        if not _passing(failed) or time.monotonic() > deadline:
            raise KafkaException(failed)
        time.sleep(0.2)


LEADER_WAIT_S = 10.0  # how long a partition may be without a leader before a read says so
# A broker just back answers for a moment with the epochs of before (UNKNOWN_LEADER_EPOCH: "leader epoch is
# newer than broker epoch", seen on a fresh reader right after a restart), or has no offsets yet to list.
_NO_LEADER_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
                            KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._TRANSPORT, KafkaError._TIMED_OUT})  # fmt: skip


def _passing(error: KafkaError) -> bool:
    """Whether an error of a partition's offsets is one a moment cures (no leader yet, a broker coming back)."""
    return error.code() in _NO_LEADER_YET or error.retriable()


# Records taken from the local queue per call once the first has arrived: one C call builds them all.
_BATCH = 2048


def read_range(
    consumer: Consumer,
    topic: str,
    partition: int,
    first: int,
    *,
    last: int,
    timeout_s: float,
    wanted: Container[int] | None = None,
) -> Iterator[RawRecord]:
    """Records of one partition from offset `first` through `last`, or to the partition's end if sooner.

    With `wanted`, only records at those offsets are yielded (the others are read through, never
    turned into RawRecords). See read_ranges.
    """
    return read_ranges(consumer, topic, {partition: (first, last)}, timeout_s=timeout_s, wanted=wanted)


def read_ranges(
    consumer: Consumer,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    timeout_s: float,
    wanted: Container[int] | None = None,
) -> Iterator[RawRecord]:
    """Records of each partition of `ranges` from its first offset through its last, or to its end if sooner.

    The partitions are read in one assignment, so their fetches go out together: reading six
    partitions one after another took six fetch rounds. Each partition's records come in order.
    `wanted`, for a read of one partition: only records at those offsets are yielded. Waits up to
    `timeout_s` for each fetch, never for a batch to fill. The partitions are unassigned
    afterwards: an assigned partition is fetched in the background every fetch.wait.max.ms until
    it is unassigned, which between reads is CPU for nothing in the reader and in the broker.
    """
    left = {partition: last for partition, (_, last) in ranges.items()}
    if not left:
        return
    consumer.assign([TopicPartition(topic, partition, first) for partition, (first, _) in ranges.items()])
    try:
        while left:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise KafkaAdapterError(f"timed out reading {topic}[{','.join(map(str, sorted(left)))}] from "
                                        f"offset(s) {', '.join(str(ranges[p][0]) for p in sorted(left))}")  # fmt: skip
            for received in (msg, *consumer.consume(_BATCH, 0)):
                if not left:
                    return  # every range read: what else the batch holds is not asked for
                partition = received.partition()
                if partition is not None and partition not in left:
                    continue  # its range is read: fetched before it was done
                error = received.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaAdapterError(f"reading {topic}[{partition}] failed: {error.str()}")
                    left.pop(partition or 0, None)
                    continue
                offset = received.offset() or 0
                if wanted is None or offset in wanted:
                    yield raw_record(received)
                if offset >= left[partition or 0]:
                    del left[partition or 0]
    finally:
        _release(consumer, topic, sorted(ranges))


def read_points(
    consumer: Consumer,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    *,
    timeout_s: float,
    before_each: Callable[[], None] = lambda: None,
) -> Iterator[RawRecord]:
    """The records at `offsets` (ascending) of one partition, one seek each: for offsets far apart.

    Meant for a consumer whose fetches bring one record batch (max.partition.fetch.bytes 1), so
    a seek costs one small round trip whatever lies between the offsets. An offset that holds no
    record any more (compacted away) yields nothing; the next record found stands in for no one.
    `before_each` runs before every offset (a deadline check may raise there).
    """
    if not offsets:
        return
    consumer.assign([TopicPartition(topic, partition, offsets[0])])
    try:
        for n, offset in enumerate(offsets):
            before_each()
            if n:
                consumer.seek(TopicPartition(topic, partition, offset))
            record = _first_at_or_after(consumer, topic, partition, offset, timeout_s)
            if record is not None and record.position.offset == offset:
                yield record
    finally:
        _release(consumer, topic, [partition])


def _first_at_or_after(
    consumer: Consumer, topic: str, partition: int, offset: int, timeout_s: float
) -> RawRecord | None:
    """The first record at `offset` or later (None at the partition's end); skips what a seek left queued."""
    while True:
        msg = consumer.poll(timeout_s)
        if msg is None:
            raise KafkaAdapterError(f"timed out reading {topic}[{partition}] at offset {offset}")
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return None
            raise KafkaAdapterError(f"reading {topic}[{partition}] failed: {error.str()}")
        if (msg.offset() or 0) >= offset:
            return raw_record(msg)


def renewed(consumer: Consumer, make: Callable[[], Consumer]) -> Consumer:
    """A new consumer, from `make`, in place of one whose request failed.

    After a broker node is lost, a consumer may keep asking the lost leader for watermarks (the
    request times out, and librdkafka does not refresh its metadata for it) until its periodic
    metadata refresh, five minutes later: seen here as a worker stuck that long after a node loss.
    A new consumer asks the cluster afresh. The old one holds no group membership, so closing it
    is quick.
    """
    closed_quietly(consumer)
    return make()


def closed_quietly(consumer: Consumer) -> None:
    """Closes a consumer whose request failed; a failure to close it is logged, not raised (it is dropped anyway)."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as exc:
        _LOG.debug("closing a failed consumer: %s", exc)


def raw_record(msg: Message) -> RawRecord:
    """A consumed message as the core's RawRecord: where it was read, its bytes, its timestamp, its headers."""
    return RawRecord(LogPosition(msg.partition() or 0, msg.offset() or 0), msg.key(), msg.value(), msg.timestamp()[1],
                     header_pairs(msg.headers()), msg.topic())  # fmt: skip


def _release(consumer: Consumer, topic: str, partitions: list[int]) -> None:
    try:
        consumer.unassign()
    except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer was closed first
        _LOG.debug("unassign after reading %s%s failed: %s", topic, partitions, exc)
