"""The pipeline's topic layout (docs/concepts/topics.md) and its idempotent creation."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType

from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.admin import admin_client, admin_request, fetch_metadata
from pipeline.kafka.errors import KafkaAdapterError, TopicConflictError

_KEEP_FOREVER = "-1"


# A tenant with topics of its own names them: no dot, so that one tenant's topic prefix
# (`<prefix>.<tenant>.`, which its ACLs grant) never covers another tenant's topics.
_TOPIC_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class TenantNameError(DpmError):
    """A tenant id that cannot name topics of its own."""


def check_topic_tenant(tenant: str) -> str:
    """Returns `tenant` if it can have topics of its own (letters, digits, `_` and `-`), else raises."""
    if not _TOPIC_TENANT.fullmatch(tenant):
        raise TenantNameError(f"tenant {tenant!r} cannot have topics of its own: use letters, digits, _ and - "
                              "(at most 64), no dot")  # fmt: skip
    return tenant


def _of_any_generation(topic: str, first: str) -> bool:
    """Whether `topic` is `first` (a generation-1 name) or its `<first>-g<k>` of a later generation."""
    return topic == first or (topic.startswith(f"{first}-g") and topic.removeprefix(f"{first}-g").isdigit())


@dataclass(frozen=True)
class TopicNames:
    """Concrete topic names under one prefix (tests use a unique prefix each), and one tenant's if it has its own.

    Shared topics are `<prefix>.<topic>`; a tenant's own (tenancy by topic) `<prefix>.<tenant>.<topic>`.
    The topics partitioned by case (events, triggers, keys, segments) come in generations: the
    first has those names, generation k > 1 (made by `dpm topics grow`) `<name>-g<k>`; the layout
    topic (`<scope>layout`) says which generation is current.
    """

    prefix: str = "dpm"
    tenant: str | None = None
    generation: int = 1

    def __post_init__(self) -> None:
        if self.tenant is not None:
            check_topic_tenant(self.tenant)
        if self.generation < 1:
            raise ValueError(f"topic generation {self.generation} (generations count from 1)")

    def of_tenant(self, tenant: str) -> TopicNames:
        """The topics of `tenant`'s own under this prefix (their first generation)."""
        return TopicNames(self.prefix, tenant)

    def of_generation(self, generation: int) -> TopicNames:
        """The same scope's topics in another generation of the case-partitioned topics."""
        return TopicNames(self.prefix, self.tenant, generation)

    def _generational(self, name: str) -> str:
        return f"{self.scope}{name}" if self.generation == 1 else f"{self.scope}{name}-g{self.generation}"

    @property
    def scope(self) -> str:
        """What every topic name of these starts with: `<prefix>.` or `<prefix>.<tenant>.`."""
        return f"{self.prefix}.{self.tenant}." if self.tenant else f"{self.prefix}."

    @property
    def events(self) -> str:
        return self._generational("events")

    @property
    def triggers(self) -> str:
        return self._generational("triggers")

    @property
    def views(self) -> str:
        return f"{self.scope}views"

    @property
    def decisions(self) -> str:
        return f"{self.scope}decisions"

    @property
    def audit(self) -> str:
        return f"{self.scope}audit"

    @property
    def dlq(self) -> str:
        return f"{self.scope}dlq"

    @property
    def contests(self) -> str:
        """What-if re-decisions and decisive analyses of published decisions (wire/contest.py), written by auditors."""
        return f"{self.scope}contests"

    @property
    def keys(self) -> str:
        return self._generational("keys")

    @property
    def segments(self) -> str:
        return self._generational("segments")

    @property
    def layout(self) -> str:
        """The compacted topic whose one record says which generation of the case-partitioned topics is current."""
        return f"{self.scope}layout"

    @property
    def baseline_app(self) -> str:
        """The Summ-only baseline's faust app (its group, and its topics' prefix) for this generation.

        A generation has its own app: the baseline's tables are partitioned like its inputs, so a
        growth starts it afresh on the new generation, folding every case again from its events.
        """
        app = f"{self.prefix}-baseline"
        return app if self.generation == 1 else f"{app}-g{self.generation}"

    def is_events(self, topic: str) -> bool:
        """Whether `topic` is this scope's events topic in any generation (`<scope>events`, `<scope>events-g<k>`)."""
        return _of_any_generation(topic, self.of_generation(1).events)

    def is_triggers(self, topic: str) -> bool:
        """Whether `topic` is this scope's triggers topic in any generation."""
        return _of_any_generation(topic, self.of_generation(1).triggers)

    def sequencer_id(self, partition: int) -> str:
        """The transactional id of the one sequencer of an events partition (kafka/writing/sequencer.py).

        `<scope>writer.<events topic>.p<N>`: one per partition of each generation, however many cases.
        """
        return f"{self.writer_prefix}{self.events.removeprefix(self.scope)}.p{partition}"

    @property
    def writer_prefix(self) -> str:
        """What the transactional ids of this scope's sequencers start with (the ACL plan grants it)."""
        return f"{self.scope}writer."

    def case_partitioned(self) -> tuple[str, str, str, str]:
        """The topics whose partition is the case's: all must have the generation's partition count."""
        return (self.events, self.triggers, self.keys, self.segments)

    @property
    def doors_group(self) -> str:
        """The consumer group the doors divide this scope's events partitions in (kafka/writing/door_group.py).

        `<prefix>-doors` for the shared topics; a tenant's own (`<prefix>.<tenant>.doors`) with tenancy
        by topic, under the tenant's prefix: its members' addresses and partitions are the tenant's only.
        """
        return f"{self.scope}doors" if self.tenant else f"{self.prefix}-doors"

    def doors_subscription(self) -> str:
        """A subscription (librdkafka regex) to this scope's events topic in every generation."""
        return f"^{re.escape(self.of_generation(1).events)}(-g[0-9]+)?$"

    def tenant_triggers_pattern(self) -> str:
        """A subscription (librdkafka regex) to every tenant's own triggers topic under the prefix."""
        return f"^{re.escape(self.prefix)}\\.[A-Za-z0-9_-]+\\.triggers$"

    def tenant_of(self, topic: str) -> str | None:
        """The tenant whose own topic `topic` is (`<prefix>.<tenant>.<name>`), None for a shared topic."""
        inner = topic.removeprefix(f"{self.prefix}.")
        tenant, dot, _ = inner.partition(".")
        return tenant if dot and inner != topic and _TOPIC_TENANT.fullmatch(tenant) else None


@dataclass(frozen=True)
class TopicSpec:
    """One topic's required partition count and configs."""

    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    # Settings an operator may tune on a live topic: a difference is reported as drift, not refused.
    tunable: Mapping[str, str] = field(default_factory=dict)
    # What brings a topic that has fewer partitions to the count, when partitions can be added in place.
    fewer_partitions_fix: str | None = None


@dataclass(frozen=True)
class ErasureBound:
    """How soon erased records are physically gone from the compacted events and key topics.

    A record replaced by a tombstone is compacted away at most `max_lag_ms` after it was written
    (the segment holding it rolls by then, and the cleaner must clean it), and the tombstone itself
    `tombstone_ms` after that; the cleaner's own back-off (15 s by default) comes on top.
    """

    max_lag_ms: int = 3_600_000
    tombstone_ms: int = 3_600_000

    def configs(self) -> dict[str, str]:
        return {
            "segment.ms": str(self.max_lag_ms),
            "max.compaction.lag.ms": str(self.max_lag_ms),
            "delete.retention.ms": str(self.tombstone_ms),
        }


def pipeline_topics(
    names: TopicNames, partitions: int = 6, erasure: ErasureBound | None = None
) -> tuple[TopicSpec, ...]:
    """The ten topics with the configs the pipeline's guarantees depend on."""
    # A unique key per event (tenant/case/seq) means compaction never drops a live event; no time
    # retention, because replay months later must find the very offsets a decision recorded.
    compacted = {"cleanup.policy": "compact", "retention.ms": _KEEP_FOREVER, "retention.bytes": "-1"}
    bound = (erasure or ErasureBound()).configs()
    # Outputs are the audit trail: kept until an operator decides otherwise (their case content is
    # sealed under the case's data key, so erasing the key erases them too).
    outputs = {"cleanup.policy": "delete", "retention.ms": _KEEP_FOREVER}
    return (
        TopicSpec(names.events, partitions, compacted, bound),
        TopicSpec(names.triggers, partitions, {"cleanup.policy": "delete"}),
        TopicSpec(names.views, partitions, outputs),
        TopicSpec(names.decisions, partitions, outputs),
        TopicSpec(names.audit, partitions, outputs),
        TopicSpec(names.dlq, partitions, outputs),
        # Keyed tenant/case on the case's partition, like the events, so the baseline sees its cases'
        # key tombstones on the partitions it owns.
        TopicSpec(names.keys, partitions, compacted, bound),
        # A long case's segment views (segment_views.py), sealed, on the case's partition; compacted with
        # the events' erasure bound, since erasure tombstones them too.
        TopicSpec(names.segments, partitions, compacted, bound),
        # One record per scope (wire/layout.py): the current generation of the case-partitioned topics and
        # their partition count, kept forever; every process reads it at start and while it runs.
        TopicSpec(names.layout, 1, {"cleanup.policy": "compact", "retention.ms": _KEEP_FOREVER}),
        # Contests of decisions (wire/contest.py), kept like the outputs and sealed like them, partitioned like
        # them: a reader finds a decision's contests through the lookup index, wherever they are. A contests
        # topic made with one partition (before the index) gains the rest in place.
        TopicSpec(names.contests, partitions, outputs, fewer_partitions_fix=MIGRATE_CONTESTS),
    )


MIGRATE_CONTESTS = "`dpm topics migrate-contests` adds the partitions in place"


def add_partitions(client_config: dict[str, str], topic: str, count: int, timeout_s: float = 30.0) -> None:
    """Takes `topic` to `count` partitions (records stay where they are; new ones spread over all)."""
    admin = admin_client(client_config)  # kept referenced until answered: its futures fail once it is gone
    try:
        for future in admin.create_partitions([NewPartitions(topic, count)], request_timeout=timeout_s).values():
            future.result(timeout=timeout_s + 1)
    except KafkaException as exc:
        raise KafkaAdapterError(f"adding partitions to {topic} failed: {exc.args[0]}") from exc


# The Summ-only baseline's faust tables (their changelogs are `<app id>-<table>-changelog`).
BASELINE_TABLES = ("summ-cases", "summ-steps", "summ-decided")


@dataclass(frozen=True)
class BaselineTopics:
    """The topics the Summ-only baseline (faust app `app_id`) keeps beside the pipeline's own."""

    app_id: str

    def changelog(self, table: str) -> str:
        return f"{self.app_id}-{table}-changelog"

    @property
    def leader(self) -> str:
        """Faust's leader-election topic."""
        return f"{self.app_id}-__assignor-__leader"

    @property
    def ledger(self) -> str:
        """The published ledger: input offsets whose outputs are committed (pipeline.kafka.processing.once)."""
        return f"{self.app_id}-published"

    def specs(self, partitions: int, erasure: ErasureBound | None = None) -> tuple[TopicSpec, ...]:
        """Created before faust starts, so the app never finds a table's changelog missing from the metadata.

        The changelogs hold each case's sealed steps, so they carry the erasure bound like the events;
        the ledger is compacted to one record per input partition.
        """
        compacted = {"cleanup.policy": "compact"}
        bound = (erasure or ErasureBound()).configs()
        changelogs = tuple(TopicSpec(self.changelog(t), partitions, compacted, bound) for t in BASELINE_TABLES)
        # Small segments, cleaned early: a member reads its partitions' ledger records whenever it takes them over.
        often = {"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
        ledger = TopicSpec(self.ledger, partitions, compacted, often)
        return (*changelogs, TopicSpec(self.leader, 1, {"cleanup.policy": "delete"}), ledger)


@dataclass(frozen=True)
class TopicReport:
    """Outcome of `ensure_topics`: which topics were made and which already matched."""

    created: tuple[str, ...]
    existing: tuple[str, ...]
    drift: tuple[str, ...] = ()  # tunable settings of existing topics that differ from the spec


def _describe_existing(
    admin: AdminClient, specs: tuple[TopicSpec, ...], timeout_s: float
) -> dict[str, tuple[int, dict[str, str]]]:
    """Returns partition count and current configs of those specs' topics that exist."""
    metadata = admin.list_topics(timeout=timeout_s)
    present = [s for s in specs if s.name in metadata.topics]
    if not present:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in present]
    described: dict[str, tuple[int, dict[str, str]]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        entries = future.result(timeout=timeout_s)
        configs = {name: str(entry.value) for name, entry in entries.items()}
        described[resource.name] = (len(metadata.topics[resource.name].partitions), configs)
    return described


def _differences(wanted: Mapping[str, str], configs: dict[str, str], verb: str = "needs") -> list[str]:
    return [f"{key}={configs.get(key)} ({verb} {value})" for key, value in wanted.items() if configs.get(key) != value]


def _conflicts(spec: TopicSpec, partitions: int, configs: dict[str, str]) -> list[str]:
    found = _differences(spec.configs, configs)
    if partitions != spec.partitions:
        fix = f": {spec.fewer_partitions_fix}" if partitions < spec.partitions and spec.fewer_partitions_fix else ""
        found.insert(0, f"partitions={partitions} (needs {spec.partitions}{fix})")
    return found


def ensure_topics(
    admin: AdminClient,
    specs: tuple[TopicSpec, ...],
    replication_factor: int,
    timeout_s: float = 30.0,
) -> TopicReport:
    """Creates missing topics and checks existing ones; idempotent.

    Raises TopicConflictError, naming every differing setting, when an existing topic does
    not match its spec: silently running on a wrongly configured events topic (say one with
    time retention) would break replay later, so it is refused up front.
    """
    try:
        existing = _describe_existing(admin, specs, timeout_s)
        problems = [
            f"{s.name}: " + ", ".join(diff)
            for s in specs
            if s.name in existing and (diff := _conflicts(s, *existing[s.name]))
        ]
        if problems:
            raise TopicConflictError("existing topics conflict with the pipeline's layout: " + "; ".join(problems))
        drift = tuple(
            f"{s.name}: " + ", ".join(diff)
            for s in specs
            if s.name in existing and (diff := _differences(s.tunable, existing[s.name][1], "wants"))
        )
        missing = [s for s in specs if s.name not in existing]
        if missing:
            new = [NewTopic(s.name, s.partitions, replication_factor, config={**s.configs, **s.tunable})
                   for s in missing]  # fmt: skip
            for future in admin.create_topics(new, request_timeout=timeout_s).values():
                _created_or_raced(future, timeout_s)
            _await_leaders(admin, [s.name for s in missing], timeout_s)
    except KafkaException as exc:
        raise KafkaAdapterError(f"topic creation failed: {exc.args[0]}") from exc
    return TopicReport(
        created=tuple(s.name for s in missing),
        existing=tuple(s.name for s in specs if s.name in existing),
        drift=drift,
    )


def _known_everywhere(admin: AdminClient, names: list[str], timeout_s: float) -> bool:
    """True when the topics have leaders and a config request for them succeeds (it may go to any broker)."""
    topics = admin.list_topics(timeout=timeout_s).topics
    if not all(
        n in topics and topics[n].error is None and all(p.leader >= 0 for p in topics[n].partitions.values())
        for n in names
    ):
        return False
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    try:
        for future in admin.describe_configs(resources, request_timeout=timeout_s).values():
            future.result(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def _await_leaders(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Waits until every broker serves the new topics.

    Creation returns once the controller accepted it; brokers learn of it a moment later, and a
    producer or config request in that window fails with UNKNOWN_TOPIC_OR_PART. Requests land on
    any broker, so three checks in a row must succeed.
    """
    deadline = time.monotonic() + timeout_s
    streak = 0
    while time.monotonic() < deadline:
        streak = streak + 1 if _known_everywhere(admin, names, timeout_s) else 0
        if streak >= 3:
            return
        time.sleep(0.2)
    raise KafkaAdapterError(f"topics {names} are not served by every broker after {timeout_s:.0f}s")


def _created_or_raced(future: Future[None], timeout_s: float) -> None:
    """Waits for one creation; another process creating the same topic meanwhile is fine."""
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def create_pipeline_topics(
    client_config: dict[str, str],
    names: TopicNames,
    partitions: int = 6,
    replication: int | None = None,
    erasure: ErasureBound | None = None,
) -> TopicReport:
    """Creates (or checks) the ten topics; replication defaults to min(3, brokers in the cluster)."""
    factor = replication or min(3, len(fetch_metadata(client_config).broker_ids))
    return ensure_topics(admin_client(client_config), pipeline_topics(names, partitions, erasure), factor)


def existing_topics(client_config: dict[str, str], timeout_s: float = 30.0) -> set[str]:
    """The names of every topic the principal may see on the cluster."""
    return set(partition_counts(client_config, timeout_s))


def partition_counts(client_config: dict[str, str], timeout_s: float = 30.0) -> dict[str, int]:
    """Every topic the principal may see on the cluster, with its number of partitions."""
    try:
        topics = admin_client(client_config).list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise KafkaAdapterError(f"listing topics failed: {exc.args[0]}") from exc
    return {name: len(meta.partitions) for name, meta in topics.items()}


def delete_topics(client_config: dict[str, str], topics: list[str], timeout_s: float = 30.0) -> None:
    """Deletes `topics` (and every record on them); waits until the cluster has."""
    if not topics:
        return
    admin_request(client_config, lambda admin: admin.delete_topics(topics, operation_timeout=timeout_s),
                  failed=f"deleting {', '.join(topics)} failed", refused=lambda topic: f"to delete {topic}",
                  timeout_s=timeout_s)  # fmt: skip


def remove_pipeline(client_config: dict[str, str], prefix: str, timeout_s: float = 30.0) -> tuple[str, ...]:
    """Deletes every topic and consumer group of one pipeline; returns the topics.

    For throwaway pipelines (the demo's): its topics (`<prefix>.*`), the baseline's internal topics
    (`<prefix>-baseline-*`) and both groups (`<prefix>-projection`, `<prefix>-baseline`); a pipeline
    whose prefix merely starts the same is left alone.
    """
    mine = (f"{prefix}.", f"{prefix}-baseline-")
    groups_of = {f"{prefix}-projection", f"{prefix}-baseline"}  # and the baseline of each later generation
    topics = tuple(sorted(t for t in existing_topics(client_config, timeout_s=10) if t.startswith(mine)))
    delete_topics(client_config, list(topics), timeout_s)
    admin = admin_client(client_config)
    try:
        groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid
                  if g.group_id in groups_of or g.group_id.startswith(f"{prefix}-baseline-g")]  # fmt: skip
        for future in admin.delete_consumer_groups(groups).values() if groups else ():
            future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaAdapterError(f"removing the consumer groups of {prefix} failed: {exc}") from exc
    return topics
