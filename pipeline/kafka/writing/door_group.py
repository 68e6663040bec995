"""The doors' consumer group: which door replica owns (sequences) each events partition, by Kafka's group protocol.

Every door process (`dpm api`, `dpm mcp --http`) joins the group `<prefix>-doors` subscribed to the
shared events topic, in every generation (with tenancy by topic, each tenant's `<prefix>.<tenant>.doors`
subscribed to the tenant's own). The group coordinator divides their partitions among the live doors
(cooperative-sticky: a join or a leave moves only the partitions it must), as Kafka Streams and
faust divide a topic's partitions among their instances. A door's address travels in its
`client.id` (`dpm-door@<url>`), which the group's description hands every member: the route to a
key's owner, as faust's `table_route` reads its members' advertised URLs.

The consumer never reads a record: each partition is paused as soon as it is assigned; the group
is a membership, not a reader. Ownership is an optimisation, never what keeps a case whole: the
sequencers fence one another per partition (sequencer.py), so a door that still writes a partition
it lost, or writes one whose owner is gone, hands the partition over instead of forking a case.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.kafka.cluster.admin import admin_client
from pipeline.kafka.cluster.topics import TopicNames

CLIENT_ID_PREFIX = "dpm-door@"
_LIB_LOG = logging.getLogger("pipeline.kafka.librdkafka")
_LOG = logging.getLogger("pipeline.kafka.doors")
DESCRIBE_EVERY_S = 2.0  # how stale another door's view of the group may get without a rebalance of its own
_NO_TIMEOUT_S = 3600  # librdkafka's longest: a group description is waited for as long as the cluster takes (_ask)


@dataclass(frozen=True)
class GroupView:
    """What this door knows of the group: who owns each partition, and whether the group is settled."""

    owners: dict[tuple[str, int], str] = field(default_factory=dict)  # (topic, partition) -> door URL
    settled: bool = False  # the group is stable and this door holds its assignment
    members: int = 0

    def owner(self, topic: str, partition: int) -> str | None:
        return self.owners.get((topic, partition))


def owners_of(members: Sequence[tuple[str, Sequence[tuple[str, int]]]]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> URL from the members' (client id, assigned partitions); other clients are left out."""
    owners = {}
    for client_id, partitions in members:
        if client_id.startswith(CLIENT_ID_PREFIX):
            url = client_id.removeprefix(CLIENT_ID_PREFIX)
            owners.update(dict.fromkeys(partitions, url))
    return owners


class DoorGroup:
    """This door's membership of the doors' group, kept on a thread of its own until `close`.

    `view()` is the latest GroupView, read without a lock (an immutable value replaced whole).
    """

    def __init__(self, client_config: dict[str, str], group_id: str, subscription: str, url: str, *,
                 session_timeout_ms: int = 10_000) -> None:  # fmt: skip
        self.url, self._group_id = url, group_id
        self._consumer = Consumer(
            {**client_config, "group.id": group_id, "client.id": f"{CLIENT_ID_PREFIX}{url}",
             "enable.auto.commit": False, "auto.offset.reset": "latest",
             "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": session_timeout_ms,
             "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
             # a tenant's topics made while the doors run join the group within this
             "topic.metadata.refresh.interval.ms": 10_000},
            logger=_LIB_LOG,
        )  # fmt: skip
        self._admin: AdminClient = admin_client(client_config)
        self._own: frozenset[tuple[str, int]] = frozenset()  # replaced whole: read from other threads
        self._assigned_once = False
        self._changed = True
        self._view = GroupView()
        self._stop = threading.Event()
        self._consumer.subscribe([subscription], on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._revoked)  # fmt: skip
        self._thread = threading.Thread(target=self._run, name=f"dpm-door-group-{group_id}", daemon=True)
        self._thread.start()

    def view(self) -> GroupView:
        return self._view

    def owned(self) -> frozenset[tuple[str, int]]:
        """The partitions the coordinator gave this door."""
        return self._own

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)  # a membership, not a reader: no record is fetched
        self._own = self._own | {(tp.topic, tp.partition) for tp in partitions}
        self._assigned_once, self._changed = True, True

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._own = self._own - {(tp.topic, tp.partition) for tp in partitions}
        self._changed = True

    def _run(self) -> None:
        described_at = 0.0
        asked: Future[Any] | None = None
        while not self._stop.is_set():
            try:
                self._consumer.poll(0.2)  # serves the group's callbacks and heartbeats; no record comes
            except KafkaException as exc:
                _LOG.warning("the doors' group: %s", exc.args[0])
            if asked is not None and asked.done():
                self._described(asked)
                asked = None
            if asked is None and (self._changed or time.monotonic() - described_at >= DESCRIBE_EVERY_S):
                self._changed = False
                described_at = time.monotonic()
                asked = self._ask()
        try:
            self._consumer.close()  # leaves the group: the others take its partitions over at once
        except KafkaException as exc:
            _LOG.warning("leaving the doors' group: %s", exc.args[0])

    def _ask(self) -> Future[Any] | None:
        """Asks for the group's description; its answer is read when it comes (one request at a time).

        Never with a timeout of its own: with librdkafka 2.16 a DescribeConsumerGroups request that
        times out while its coordinator is being looked up (the broker away) aborts the process
        once the broker is back (an assertion in rd_kafka_enq_once_del_source_return, reproduced
        here). So a request waits as long as librdkafka allows (an hour: an outage longer than that
        can still meet the bug), and no other is sent meanwhile.
        """
        try:
            return self._admin.describe_consumer_groups([self._group_id],
                                                        request_timeout=_NO_TIMEOUT_S)[self._group_id]  # fmt: skip
        except KafkaException as exc:
            _LOG.warning("describing the doors' group: %s", exc.args[0])
            return None

    def _described(self, asked: Future[Any]) -> None:
        try:
            group = asked.result(timeout=0)
        except KafkaException as exc:
            _LOG.warning("describing the doors' group: %s", exc.args[0])
            return
        members = [(m.client_id, [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or ())])
                   for m in group.members]  # fmt: skip
        owners = owners_of(members)
        owners.update(dict.fromkeys(self._own, self.url))  # this door's own assignment is the authority on it
        settled = group.state == ConsumerGroupState.STABLE and self._assigned_once
        self._view = GroupView(owners, settled, len(members))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


class DoorGroups:
    """This door's memberships: the shared topics' group, or one per tenant it serves (tenancy by topic).

    A tenant's group is joined at the door's first append for it, under the tenant's own prefix,
    so that one tenant's principal never joins or describes a group holding another's partitions.
    """

    def __init__(self, client_config: dict[str, str], names: TopicNames, *, by_topic: bool, url: str,
                 session_timeout_ms: int = 10_000) -> None:  # fmt: skip
        self.url = url
        self._config, self._names, self._by_topic = client_config, names, by_topic
        self._session_timeout_ms = session_timeout_ms
        self._groups: dict[str | None, DoorGroup] = {}
        self._lock = threading.Lock()
        if not by_topic:
            self._of(None)  # the shared topics' group, joined at once

    def for_topic(self, topic: str) -> DoorGroup:
        """The group that divides `topic`'s partitions (joined now if this is the door's first use of it)."""
        return self._of(self._names.tenant_of(topic) if self._by_topic else None)

    def _of(self, tenant: str | None) -> DoorGroup:
        with self._lock:
            group = self._groups.get(tenant)
            if group is None:
                scope = self._names if tenant is None else self._names.of_tenant(tenant)
                group = DoorGroup(self._config, scope.doors_group, scope.doors_subscription(), self.url,
                                  session_timeout_ms=self._session_timeout_ms)  # fmt: skip
                self._groups[tenant] = group
            return group

    def close(self) -> None:
        with self._lock:
            groups, self._groups = list(self._groups.values()), {}
        for group in groups:
            group.close()
