"""Tenancy by topic (DPM_TENANCY=topics): onboarding a tenant onto topics of its own, listing, removing.

A tenant's own topics are the pipeline's nine under `<prefix>.<tenant>.`, so a broker can grant a
tenant's principals exactly its own (acl_plan). Workers pick a new tenant up by their subscription
pattern, within PATTERN_REFRESH_MS of its topics being created. Removing a tenant destroys its
key-encryption keys first (everything sealed under them is unreadable from then on), then deletes
its topics.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.keystore import case_keys_from
from pipeline.kafka.layout import current_generation
from pipeline.kafka.topics import (
    ErasureBound,
    TopicNames,
    TopicReport,
    create_pipeline_topics,
    delete_topics,
    existing_topics,
    pipeline_topics,
)


def topics_of(settings: Settings, tenant: str) -> TopicNames:
    """The topics of a tenant's records: its own with tenancy by topic, else the shared ones (current generation)."""
    names = TopicNames(settings.kafka.topic_prefix)
    if settings.kafka.tenancy == "topics":
        return names.of_tenant(tenant)
    return current_generation(settings.kafka.client_config(), names)


def topic_scopes(settings: Settings) -> list[TopicNames]:
    """Every set of topics outputs are on: the shared ones (current generation), or each tenant's own (those it has)."""
    names = TopicNames(settings.kafka.topic_prefix)
    if settings.kafka.tenancy != "topics":
        return [current_generation(settings.kafka.client_config(), names)]
    return [names.of_tenant(t.tenant) for t in list_tenants(settings)]


def _require_topics_mode(settings: Settings) -> TopicNames:
    if settings.kafka.tenancy != "topics":
        raise DpmError("tenants have topics of their own only with DPM_TENANCY=topics (the shared topics need none)")
    return TopicNames(settings.kafka.topic_prefix)


def add_tenant(settings: Settings, tenant: str, partitions: int, replication: int | None = None) -> TopicReport:
    """Creates (or checks) the tenant's nine topics; idempotent."""
    names = _require_topics_mode(settings).of_tenant(tenant)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    return create_pipeline_topics(settings.kafka.client_config(), names, partitions, replication, bound)


@dataclass(frozen=True)
class TenantTopics:
    tenant: str
    present: tuple[str, ...]
    missing: tuple[str, ...]


def list_tenants(settings: Settings) -> list[TenantTopics]:
    """Every tenant with a topic of its own under the prefix, and which of its nine topics exist."""
    names = _require_topics_mode(settings)
    topics = existing_topics(settings.kafka.client_config())
    tenants = sorted({t for topic in topics if (t := names.tenant_of(topic)) is not None})
    listed = []
    for tenant in tenants:
        wanted = [spec.name for spec in pipeline_topics(names.of_tenant(tenant))]
        listed.append(TenantTopics(tenant, tuple(t for t in wanted if t in topics),
                                   tuple(t for t in wanted if t not in topics)))  # fmt: skip
    return listed


def remove_tenant(settings: Settings, tenant: str) -> tuple[int, tuple[str, ...]]:
    """Destroys the tenant's key-encryption keys, then deletes its topics; returns (cases shredded, topics deleted)."""
    names = _require_topics_mode(settings).of_tenant(tenant)
    config = settings.kafka.client_config()
    existing = existing_topics(config)
    mine = tuple(spec.name for spec in pipeline_topics(names) if spec.name in existing)
    if not mine:
        raise DpmError(f"tenant {tenant!r} has no topics under {names.scope}: nothing to remove")
    shredded = 0
    if names.keys in existing:
        with closing(case_keys_from(settings, names=names)) as keys:
            shredded = len(keys.erase_tenant(tenant))
    delete_topics(config, list(mine))  # its keys are destroyed already: what it leaves is unreadable
    return shredded, mine
