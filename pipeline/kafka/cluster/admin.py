"""Cluster metadata checks through confluent-kafka's AdminClient."""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, TopicDescription

from pipeline.kafka.errors import BrokerUnavailableError, KafkaAdapterError, NotAuthorizedError, wrapped

# librdkafka logs connection refusals to stderr by default; route them through logging instead.
_LIBRDKAFKA_LOG = logging.getLogger("pipeline.kafka.librdkafka")
# Library chatter (retries while a coordinator loads) reaches a worker's log through the root handler,
# but never the terminal of a one-shot command that configured no logging.
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_PROBE_LOG = logging.getLogger("pipeline.kafka.librdkafka.metadata")  # the metadata probe's (fetch_metadata)
_PROBE_LOG.propagate = False
_PROBE_LOG.addHandler(logging.NullHandler())


# librdkafka requires a group id of every consumer, and looks its coordinator up even when the
# consumer only assigns partitions and never joins or commits: a secured cluster then wants DESCRIBE
# on the group. Every such reader takes a fresh id under this one prefix, which the ACL plan grants.
READER_GROUP_PREFIX = "dpm-reader-"


def reader_group(purpose: str) -> str:
    """A fresh group id for a consumer that assigns partitions itself and never joins the group."""
    return f"{READER_GROUP_PREFIX}{purpose}-{uuid.uuid4().hex}"


_K = TypeVar("_K")


def admin_request(
    client_config: dict[str, str],
    start: Callable[[AdminClient], Mapping[_K, Future[Any]]],
    *,
    failed: str,
    refused: Callable[[_K], str],
    timeout_s: float = 30.0,
) -> None:
    """Sends one admin request (`start(admin)`) and waits for each of its items; failures raise KafkaAdapterError.

    `failed` says what a request failing as a whole was ("could not apply ACLs"), `refused(key)`
    what a refused item was ("the ACL ..."). The client is kept referenced until every future is
    done: its futures fail with _DESTROY once it is gone.
    """
    admin = admin_client(client_config)
    try:
        futures = start(admin)
    except KafkaException as exc:
        raise KafkaAdapterError(f"{failed}: {exc.args[0]}") from exc
    for key, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaAdapterError(f"the cluster refused {refused(key)}: {exc.args[0]}") from exc


def cluster_operations(client_config: dict[str, str], timeout_s: float = 30.0) -> frozenset[str]:
    """What the principal may do on the cluster resource (`DESCRIBE`, `ALTER`, ...; every one without an authorizer).

    Asked before a request that needs one of them: librdkafka 2.16 crashes the process on some
    refusals (DescribeUserScramCredentials), and hands back an empty list for a refused DescribeAcls.
    """
    admin = admin_client(client_config)
    try:
        described = admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout_s).result(
            timeout_s)  # fmt: skip
    except KafkaException as exc:
        raise KafkaAdapterError(f"could not describe the cluster: {exc.args[0]}") from exc
    return frozenset(op.name for op in described.authorized_operations or ())


def cluster_allows(client_config: dict[str, str], operation: str) -> bool:
    """Whether the principal may `operation` (`DESCRIBE`, `ALTER`, ...) the cluster resource, itself or through ALL."""
    allowed = cluster_operations(client_config)
    return operation in allowed or "ALL" in allowed


def require_cluster_operation(client_config: dict[str, str], operation: str, doing: str) -> None:
    """Raises NotAuthorizedError, naming what was being done, unless the principal may `operation` the cluster."""
    if not cluster_allows(client_config, operation):
        raise NotAuthorizedError(f"{doing} needs {operation.title()} on the cluster, which the principal of "
                                 "DPM_KAFKA_CONFIG lacks (the operator has Describe, the admin all)")  # fmt: skip


@dataclass(frozen=True)
class ClusterInfo:
    """What one metadata request told us about the cluster."""

    cluster_id: str | None
    broker_ids: tuple[int, ...]
    topics: tuple[str, ...]


def admin_client(client_config: dict[str, str]) -> AdminClient:
    """Builds an AdminClient whose library logs go to Python logging."""
    return AdminClient(dict(client_config), logger=_LIBRDKAFKA_LOG)


def fetch_metadata(client_config: dict[str, str], timeout_s: float = 5.0) -> ClusterInfo:
    """Performs one metadata request; raises BrokerUnavailableError when no broker answers.

    A broker that answers but refuses the credentials (a wrong SASL password or user) raises
    KafkaAdapterError saying so, with librdkafka's reason, which never holds the secret. It lists
    every topic: what `dpm broker status` shows; a probe that needs no topics is `ensure_reachable`.
    """
    metadata = _probed(client_config, lambda admin: admin.list_topics(timeout=timeout_s))
    return ClusterInfo(
        cluster_id=metadata.cluster_id,
        broker_ids=tuple(sorted(metadata.brokers)),
        topics=tuple(sorted(t for t in metadata.topics if not t.startswith("__"))),
    )


_T = TypeVar("_T")


def _probed(client_config: dict[str, str], ask: Callable[[AdminClient], _T]) -> _T:
    """`ask(admin)` of a fresh AdminClient; BrokerUnavailableError, or KafkaAdapterError for refused credentials."""
    errors: list[KafkaError] = []
    # Its own quiet logger: serving error_cb below serves the library's queued log lines too, and a
    # refused connection must reach the user as this function's one error, not as log lines first.
    admin = AdminClient({**client_config, "error_cb": errors.append}, logger=_PROBE_LOG)  # type: ignore[dict-item]
    try:
        return ask(admin)
    except (KafkaException, TimeoutError) as exc:
        admin.poll(0)  # serves error_cb: the reason behind a failed request
        where = client_config.get("bootstrap.servers")
        refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if refused:
            raise KafkaAdapterError(f"Kafka at {where} refused the credentials of DPM_KAFKA_CONFIG: "
                                    f"{refused[0].str()}") from exc  # fmt: skip
        reason = exc.args[0] if exc.args else "no answer in time"
        raise BrokerUnavailableError(f"no Kafka broker answered at {where}: {reason}") from exc


@dataclass(frozen=True)
class TopicSurvey:
    """Of the topics a process asked about: those that do not exist, and those the cluster refuses it."""

    missing: list[str]
    refused: list[str]


class TopicFacts:
    """The ids and partition counts of a process's topics, each described once and kept. Thread-safe.

    A scope's topics are described together by `survey` (one DescribeTopics request); a topic asked
    for later is described alone. Kept for the holder's life, as a follower keeps its partition
    count: a topic made again under its name, or given partitions, is seen by the next process.
    Every lookup of a fresh client had described its topics one request at a time (a topic id for
    the index, another for the key places, a partition count per reader: about 6 ms each).
    """

    def __init__(self, client_config: dict[str, str]) -> None:
        self._config = client_config
        self._known: dict[str, TopicDescription] = {}
        self._lock = threading.Lock()

    def survey(self, topics: list[str], timeout_s: float = 5.0) -> TopicSurvey:
        """Describes `topics` in one request and keeps what exists.

        DescribeTopics: not a metadata request by name, which a broker with auto-creation would
        answer by creating the topic, nor a listing, which hides refused topics as if absent.
        """
        if not topics:
            return TopicSurvey([], [])
        admin = AdminClient(self._config, logger=_PROBE_LOG)  # type: ignore[arg-type]
        try:
            futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s)
            errors = {topic: future.exception(timeout=timeout_s + 1) for topic, future in futures.items()}
        except KafkaException as exc:
            raise wrapped(exc, f"describing the topics {', '.join(topics)} failed") from exc
        except TimeoutError as exc:
            raise BrokerUnavailableError(
                f"describing the topics {', '.join(topics)}: no answer in {timeout_s:g} s"
            ) from exc
        codes = {t: e.args[0].code() for t, e in errors.items() if isinstance(e, KafkaException)}
        refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
        unexpected = [t for t, code in codes.items() if code not in _NO_SUCH_TOPIC and code != refused]
        if unexpected:
            topic = unexpected[0]
            raise KafkaAdapterError(f"describing the topic {topic} failed: {errors[topic]}")
        with self._lock:
            for topic, future in futures.items():
                if errors[topic] is None and future.result().partitions:
                    self._known[topic] = future.result()
        return TopicSurvey([t for t in topics if codes.get(t) in _NO_SUCH_TOPIC],
                           [t for t in topics if codes.get(t) == refused])  # fmt: skip

    def topic_id(self, topic: str) -> str:
        """The cluster's id of `topic` (a topic deleted and made again under its name has another)."""
        return str(self._described(topic).topic_id)

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; KafkaAdapterError when it does not exist."""
        return len(self._described(topic).partitions)

    def _described(self, topic: str) -> TopicDescription:
        with self._lock:
            known = self._known.get(topic)
        if known is None:
            known = _topic(self._config, topic)
            with self._lock:
                self._known[topic] = known
        return known


# How long a one-shot command waits for a broker before saying none answers: a broker on loopback
# answers in milliseconds, a remote one (TLS, SASL) well within it.
REACH_TIMEOUT_S = 2.0


def ensure_reachable(client_config: dict[str, str], timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raises BrokerUnavailableError, one line naming the address and what to do, unless a broker answers."""
    try:  # DescribeCluster: a fresh client's first metadata listing waits about 50 ms more (see _described)
        _probed(client_config, lambda admin: admin.describe_cluster(request_timeout=timeout_s).result(timeout_s + 1))
    except BrokerUnavailableError as exc:
        address = client_config.get("bootstrap.servers", "")
        if _listening(address):  # a server is there: it wants another protocol than the one we speak
            protocol = client_config.get("security.protocol", "plaintext")
            raise BrokerUnavailableError(
                f"a server listens at {address} but did not answer as Kafka over {protocol} within {timeout_s:g} s: "
                "if the cluster needs TLS or SASL, set DPM_KAFKA_CONFIG to its client properties "
                "(security.protocol, sasl.*, ssl.*)"
            ) from exc
        raise BrokerUnavailableError(
            f"no Kafka broker answered at {address} within {timeout_s:g} s: start the local one with "
            "`dpm broker up`, or set DPM_BOOTSTRAP to your cluster's address"
        ) from exc


def _listening(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Whether the first bootstrap address accepts a TCP connection."""
    host, _, port = bootstrap.split(",", maxsplit=1)[0].strip().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def wait_for_brokers(client_config: dict[str, str], expected_brokers: int, timeout_s: float) -> ClusterInfo:
    """Polls metadata until `expected_brokers` brokers are registered, or raises after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            info = fetch_metadata(client_config, timeout_s=min(3.0, max(0.5, deadline - time.monotonic())))
        except BrokerUnavailableError as exc:
            last_error = str(exc)
        else:
            if len(info.broker_ids) >= expected_brokers:
                return info
            last_error = f"{len(info.broker_ids)} of {expected_brokers} brokers registered"
        time.sleep(0.5)
    raise BrokerUnavailableError(f"cluster not ready after {timeout_s:.0f}s: {last_error}")


def _described(client_config: dict[str, str], topic: str, timeout_s: float = 10.0) -> TopicDescription | None:
    """The topic's description, None when it does not exist; KafkaAdapterError when the cluster cannot be asked.

    Asked with DescribeTopics, not `list_topics`: a fresh client's first `list_topics` waits about
    50 ms for librdkafka's broker state to settle (measured on loopback), DescribeTopics a few ms,
    and every fresh lookup process asks for a partition count or two.
    """
    admin = admin_client(client_config)
    try:
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        return future.result(timeout=timeout_s + 1)  # type: ignore[no-any-return]
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise _not_authorized(topic) from exc
        if error.code() in _NO_SUCH_TOPIC:
            return None
        raise wrapped(exc, f"cannot read the metadata of {topic}") from exc
    except TimeoutError as exc:
        raise BrokerUnavailableError(f"describing {topic}: no answer in {timeout_s:g} s") from exc


# What a topic that does not exist (or is not made yet: no leaders) answers to DescribeTopics.
_NO_SUCH_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})


def _not_authorized(topic: str) -> NotAuthorizedError:
    return NotAuthorizedError(f"not authorized to use topic {topic}: the principal of DPM_KAFKA_CONFIG has no ACL "
                              "for it (see `dpm acl plan`)")  # fmt: skip


def _topic(client_config: dict[str, str], topic: str, timeout_s: float = 10.0) -> TopicDescription:
    found = _described(client_config, topic, timeout_s)
    if found is None or not found.partitions:
        raise KafkaAdapterError(f"topic {topic} does not exist: run `dpm topics create`")
    return found


def topic_exists(client_config: dict[str, str], topic: str) -> bool:
    """Whether `topic` exists; KafkaAdapterError when the cluster cannot be asked."""
    found = _described(client_config, topic)
    return found is not None and bool(found.partitions)


def topic_partitions(client_config: dict[str, str], topic: str) -> int:
    """How many partitions `topic` has; KafkaAdapterError when it does not exist."""
    return len(_topic(client_config, topic).partitions)


def topic_replication(client_config: dict[str, str], topic: str) -> int:
    """How many replicas each partition of `topic` has (its first partition's count)."""
    partitions = _topic(client_config, topic).partitions
    return len(min(partitions, key=lambda info: info.id).replicas)


def group_members(client_config: dict[str, str], group: str, timeout_s: float = 5.0) -> int | None:
    """How many members a consumer group has now; None when the cluster does not say (no right to ask, no answer).

    For hints only (a decision waited for in vain: is any worker running?), never for a decision
    the pipeline makes: a group's membership changes at any moment.
    """
    admin = AdminClient(dict(client_config), logger=_PROBE_LOG)
    try:
        described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout_s)
    except (KafkaException, TimeoutError, ValueError):
        return None
    return len(described.members)


def topic_id(client_config: dict[str, str], topic: str, timeout_s: float = 10.0) -> str:
    """The cluster's id of `topic` (a topic deleted and made again under its name has another)."""
    return str(_topic(client_config, topic, timeout_s).topic_id)
