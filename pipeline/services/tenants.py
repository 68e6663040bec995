"""Tenancy by topic (DPM_TENANCY=topics): a tenant's whole life on the broker: onboarding, listing, removing.

A tenant's own topics are the pipeline's ten under `<prefix>.<tenant>.`, so a broker can grant a
tenant's principals exactly its own (acl_plan). Workers pick a new tenant up by their subscription
pattern, within PATTERN_REFRESH_MS of its topics being created.

Whatever names a tenant goes with it: removing one destroys its key-encryption keys first
(everything sealed under them is unreadable from then on), deletes its topics (Kafka drops the
groups' committed offsets on them, which the removal checks), removes its API keys, revokes every
grant of its principal and every grant on its topics, and deletes its principal's SCRAM credential,
so an old client properties file stops authenticating (`take_away`, which `add --replace` runs too).
Adding a tenant refuses a name whose principal or grants outlived an earlier tenant of that name,
and an id that a shared grant would reach (grant_checks.colliding_tenant).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.acl_plan import Grant, Resource, Role, plan, principal, tenant_principal
from pipeline.kafka.cluster.acls import cluster_grants, revoke_grants
from pipeline.kafka.cluster.admin import READER_GROUP_PREFIX, cluster_allows
from pipeline.kafka.cluster.credentials import credential_files, credentials_dir, provision
from pipeline.kafka.cluster.grant_checks import (
    Overlap,
    colliding_tenant,
    isolation,
    kept_for_live_topics,
    of_pipeline,
    on_live_topics,
    revocable,
    tenant_of_principal,
    tenant_scope,
)
from pipeline.kafka.cluster.layout import current_generation
from pipeline.kafka.cluster.principals import committed_offsets_on, delete_scram_credentials, scram_mechanisms
from pipeline.kafka.cluster.topics import (
    ErasureBound,
    TopicNames,
    TopicReport,
    create_pipeline_topics,
    delete_topics,
    existing_topics,
    pipeline_topics,
)
from pipeline.kafka.keytopic.keystore import case_keys_from
from pipeline.kafka.local.local_broker import read_running
from pipeline.kafka.reading.range_reads import read_topic
from pipeline.services.api_keys import ApiKey, ApiKeys, keys_file
from pipeline.wire.key import erases


def topics_of(settings: Settings, tenant: str) -> TopicNames:
    """The topics of a tenant's records: its own with tenancy by topic, else the shared ones (current generation)."""
    names = TopicNames(settings.kafka.topic_prefix)
    if settings.kafka.tenancy == "topics":
        return names.of_tenant(tenant)
    return current_generation(settings.kafka.client_config(), names)


def topic_scopes(settings: Settings, tenant: str | None = None) -> list[TopicNames]:
    """Every set of topics outputs are on, as far as this principal can see them.

    The shared ones (current generation); with tenancy by topic, those only if they exist (a tenant
    may have been decided there before it got topics of its own), then each tenant's own, or only
    `tenant`'s. A tenant's principal sees its own topics only, so it reads with its own grants.
    """
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    if settings.kafka.tenancy != "topics":
        return [current_generation(config, names)]
    topics = existing_topics(config)
    shared = [current_generation(config, names)] if names.decisions in topics else []
    return shared + [names.of_tenant(t) for t in _tenants_in(names, topics) if tenant in (None, t)]


def _require_topics_mode(settings: Settings) -> TopicNames:
    if settings.kafka.tenancy != "topics":
        raise DpmError("tenants have topics of their own only with DPM_TENANCY=topics (the shared topics need none)")
    return TopicNames(settings.kafka.topic_prefix)


@dataclass(frozen=True)
class Leftovers:
    """What names a tenant on the cluster besides its topics: its principal's credential, and grants."""

    tenant: str
    credentials: int  # SCRAM mechanisms of its principal
    grants: tuple[Grant, ...]  # its principal's on this pipeline, and anyone's naming its topics
    elsewhere: tuple[Grant, ...]  # its principal's on other pipelines' resources (sharing the credential)

    @property
    def orphan_credential(self) -> bool:
        """A credential no other pipeline's grants use: this pipeline's to take away with its tenant."""
        return bool(self.credentials) and not self.elsewhere

    def __bool__(self) -> bool:
        return bool(self.grants) or self.orphan_credential

    def described(self) -> str:
        parts = [f"{len(self.grants)} ACL binding(s)"] if self.grants else []
        parts += [f"the SCRAM credential of {tenant_principal(self.tenant)}"] if self.orphan_credential else []
        return " and ".join(parts)


def _user(tenant: str) -> str:
    return tenant_principal(tenant).removeprefix("User:")


def leftovers(settings: Settings, tenant: str, on_cluster: list[Grant]) -> Leftovers:
    """The tenant's credential, and its grants among the cluster's `on_cluster` (cluster_grants)."""
    config, names = settings.kafka.client_config(), TopicNames(settings.kafka.topic_prefix)
    scope, who = tenant_scope(names, tenant), tenant_principal(tenant)
    # Grants that name its topics (not the operator's on every topic of the pipeline), and its principal's.
    mine = [g for g in on_cluster if (g.resource is Resource.TOPIC and g.name.startswith(scope))
            or (g.principal == who and of_pipeline(g, names))]  # fmt: skip
    # The partition readers' groups (one prefix for every pipeline) go with the principal, not with a pipeline.
    readers = [g for g in on_cluster if g.principal == who and g.name == READER_GROUP_PREFIX and g not in mine]
    elsewhere = tuple(g for g in on_cluster if g.principal == who and g not in mine and g not in readers)
    return Leftovers(tenant, len(scram_mechanisms(config, _user(tenant))),
                     tuple(mine + ([] if elsewhere else readers)), elsewhere)  # fmt: skip


@dataclass(frozen=True)
class TenantAdded:
    report: TopicReport
    replaced: Leftovers | None  # an earlier tenant's principal and grants removed first (--replace)
    properties: Path | None  # the client properties of its new principal (the local secured broker only)
    other_overlaps: tuple[Overlap, ...] = ()  # what the isolation check found about other tenants
    revoked: Revoked | None = None  # what --replace took away: the earlier tenant's grants, credential, API keys
    api_keys_kept: int = 0  # API keys of the name, made before the tenant was added (no --replace): they act for it


def add_tenant(
    settings: Settings, tenant: str, partitions: int, replication: int | None = None, *, replace: bool = False
) -> TenantAdded:
    """Creates (or checks) the tenant's ten topics; idempotent.

    A new tenant (none of its topics exist) is refused when a shared grant would reach its topics,
    when any grant on the cluster would reach them from another principal, or when its principal or
    grants are still on the cluster from an earlier tenant of that name. With `replace`, whatever an
    earlier tenant of the name left (grants, credential, API keys) is taken away first, as its
    removal takes it away (`take_away`).
    """
    names = _require_topics_mode(settings)
    collision = colliding_tenant(names, tenant)
    if collision is not None:
        raise DpmError(collision)
    own = names.of_tenant(tenant)
    config = settings.kafka.client_config()
    existing = existing_topics(config)
    replaced: Leftovers | None = None
    revoked: Revoked | None = None
    others: tuple[Overlap, ...] = ()
    if not any(spec.name in existing for spec in pipeline_topics(own)):
        on_cluster = cluster_grants(config) or []
        left = leftovers(settings, tenant, on_cluster)
        if left and not replace:
            raise DpmError(f"tenant {tenant!r} has no topics, but {left.described()} outlived an earlier tenant of "
                           f"that name (an old client properties file would read the new tenant's data): remove them "
                           f"with `dpm tenants remove {tenant} --yes`, or add with --replace")  # fmt: skip
        if replace:
            _require_alter(config, left, "adding it with --replace")
            revoked = take_away(settings, left)  # its password goes with it: the new principal gets a new one
            on_cluster = [g for g in on_cluster if g not in left.grants]
            replaced = left if left else None
        _refuse_shared_cases(settings, names, tenant, existing)
        problems = isolation(names, sorted({*_tenants_in(names, existing), tenant}), on_cluster)
        reaching = [p for p in problems if p.tenant == tenant]
        if reaching:
            raise DpmError(f"tenant {tenant!r} not added: grants on the cluster would reach its topics:\n"
                           + "\n".join(f"  {p}" for p in reaching))  # fmt: skip
        others = tuple(problems)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    report = create_pipeline_topics(config, own, partitions, replication, bound)
    kept = 0 if revoked is not None or report.existing else len(_api_keys_of(settings, tenant))
    return TenantAdded(report, replaced, _local_credential(settings, tenant), others, revoked, kept)


def _api_keys_of(settings: Settings, tenant: str) -> list[ApiKey]:
    return [k for k in ApiKeys(keys_file(settings)).listed() if k.tenant == tenant]


def _require_alter(config: dict[str, str], left: Leftovers, doing: str) -> None:
    """Refuses, changing nothing, when there are leftovers and the principal may not take them away.

    Revoking ACLs and deleting a credential need Alter on the cluster (the admin's).
    """
    if left and not cluster_allows(config, "ALTER"):
        raise DpmError(f"{doing} takes away {left.described()}, which needs Alter on the cluster: run it as the "
                       "admin (DPM_KAFKA_CONFIG naming admin.properties); nothing was changed")  # fmt: skip


def _refuse_shared_cases(settings: Settings, names: TopicNames, tenant: str, existing: Iterable[str]) -> None:
    """Refuses a tenant that still has cases on the shared topics, naming them.

    Moving a case between the two modes is not supported: its events, data key and the baseline's
    folded state live on the shared topics, and the same case id decided on new topics would be a
    second, diverging log (the baseline took the case for erased). The cases are found by their data
    keys on the shared keys topic; with DPM_ENCRYPTION=off a case has none and is not seen here.
    """
    if names.keys not in existing:
        return
    config = settings.kafka.client_config()
    cases = _cases_with_live_keys(config, current_generation(config, names).keys, tenant)
    if cases:
        shown = ", ".join(cases[:10]) + (f" and {len(cases) - 10} more" if len(cases) > 10 else "")
        raise DpmError(f"tenant {tenant!r} has {len(cases)} case(s) on the shared topics ({shown}): a case cannot "
                       f"move to topics of its own; decide them on the shared topics, or erase them there first "
                       f"(DPM_TENANCY=shared dpm erase --tenant {tenant})")  # fmt: skip


def _cases_with_live_keys(client_config: dict[str, str], keys_topic: str, tenant: str) -> list[str]:
    """Case ids of `tenant` whose data key is live (neither tombstoned nor marked erased) on a keys topic."""
    live: dict[str, bool] = {}
    prefix = f"{tenant}/".encode()
    for record in read_topic(client_config, keys_topic):
        if record.key is not None and record.key.startswith(prefix):
            live[record.key[len(prefix) :].decode(errors="replace")] = not erases(record.value)
    return sorted(case for case, alive in live.items() if alive)


def _local_credential(settings: Settings, tenant: str) -> Path | None:
    """Makes the tenant principal's SCRAM credential on the local secured broker (recorded under DPM_HOME).

    Returns its client properties file; None for any other cluster, whose credentials are made
    the cluster's own way (a Strimzi KafkaUser: `dpm acl plan --tenant T --format strimzi`). A
    credential that exists is never changed: only another pipeline's grants can be using it here.
    """
    home = settings.paths.home
    running = read_running(home)
    bootstrap = settings.kafka.client_config().get("bootstrap.servers")
    if running is None or not running.secure or bootstrap != running.bootstrap:
        return None
    user = _user(tenant)
    path, _ = credential_files(credentials_dir(home), user)
    if scram_mechanisms(settings.kafka.client_config(), user):  # kept: another pipeline's grants use it
        return path if path.exists() else None
    (made,) = provision(running.layout, home, (user,))
    return made.path


@dataclass(frozen=True)
class IsolationReport:
    """The tenants checked, and every grant (planned or on the cluster) that reaches one it must not."""

    tenants: tuple[str, ...]
    overlaps: tuple[Overlap, ...]


def isolation_report(settings: Settings, extra_tenants: Sequence[str] = ()) -> IsolationReport:
    """The isolation check over every tenant on the cluster and `extra_tenants`, every role, the cluster's grants."""
    names = TopicNames(settings.kafka.topic_prefix)
    tenants = sorted({*tenants_on_cluster(settings), *extra_tenants})
    found = isolation(names, tenants, cluster_grants(settings.kafka.client_config()) or [])
    return IsolationReport(tuple(tenants), tuple(found))


@dataclass(frozen=True)
class TenantTopics:
    tenant: str
    present: tuple[str, ...]
    missing: tuple[str, ...]


def _tenants_in(names: TopicNames, topics: Iterable[str]) -> list[str]:
    return sorted({t for topic in topics if (t := names.tenant_of(topic)) is not None})


def tenants_on_cluster(settings: Settings) -> list[str]:
    """Every tenant with a topic of its own under the prefix, whatever the tenancy mode this process runs in."""
    return _tenants_in(TopicNames(settings.kafka.topic_prefix), existing_topics(settings.kafka.client_config()))


def list_tenants(settings: Settings) -> list[TenantTopics]:
    """Every tenant with a topic of its own under the prefix, and which of its ten topics exist."""
    names = _require_topics_mode(settings)
    topics = existing_topics(settings.kafka.client_config())
    tenants = _tenants_in(names, topics)
    listed = []
    for tenant in tenants:
        wanted = [spec.name for spec in pipeline_topics(names.of_tenant(tenant))]
        listed.append(TenantTopics(tenant, tuple(t for t in wanted if t in topics),
                                   tuple(t for t in wanted if t not in topics)))  # fmt: skip
    return listed


@dataclass(frozen=True)
class TenantRemoval:
    """What removing a tenant took away."""

    tenant: str
    keys_destroyed: int
    topics: tuple[str, ...]
    revoked: Revoked  # its grants, credential and API keys
    offsets_left: tuple[str, ...]  # committed offsets still on its topics (Kafka drops them with the topics)


def remove_tenant(settings: Settings, tenant: str) -> TenantRemoval:
    """Takes away everything that names the tenant: keys, topics, grants, credential (see the module's docstring).

    Checks first that the principal may revoke grants and credentials (Alter on the cluster: the
    admin) when there are any: otherwise nothing is changed.
    """
    names = _require_topics_mode(settings).of_tenant(tenant)
    config = settings.kafka.client_config()
    existing = existing_topics(config)
    mine = tuple(spec.name for spec in pipeline_topics(names) if spec.name in existing)
    left = leftovers(settings, tenant, cluster_grants(config) or [])
    if not mine and not left:
        raise DpmError(f"tenant {tenant!r} has no topics under {names.scope}, no grants and no credential: "
                       "nothing to remove")  # fmt: skip
    _require_alter(config, left, f"removing tenant {tenant!r}")
    shredded = 0
    if names.keys in existing:
        with closing(case_keys_from(settings, names=names)) as keys:
            shredded = len(keys.erase_tenant(tenant))
    delete_topics(config, list(mine))  # its keys are destroyed already: what it leaves is unreadable
    revoked = take_away(settings, left)
    return TenantRemoval(tenant, shredded, mine, revoked, _offsets_left(config, mine, names.prefix))


@dataclass(frozen=True)
class Revoked:
    """What gave a tenant access, taken away: API keys, grants revoked, credentials deleted (or why kept)."""

    grants: int
    credentials: int
    kept: str | None  # why the principal's credential stays (another pipeline's grants use it)
    properties: Path | None  # the local properties file deleted with the credential
    api_keys: int = 0  # its keys of the HTTP API (services/api_keys.py)


def take_away(settings: Settings, left: Leftovers) -> Revoked:
    """Takes away every way in the tenant had but its topics; the one step of `remove_tenant` and `add --replace`.

    Its API keys first (the doors refuse them from their next request), then the leftovers' grants,
    then its principal's credential and local properties file unless other pipelines' grants use it.
    """
    api_keys = len(ApiKeys(keys_file(settings)).remove(tenant=left.tenant))
    config = settings.kafka.client_config()
    revoked = revoke_grants(config, left.grants)
    if left.elsewhere:
        kept = (f"{tenant_principal(left.tenant)} keeps its credential: {len(left.elsewhere)} grant(s) of other "
                f"pipelines use it, e.g. {left.elsewhere[0].resource.value} {left.elsewhere[0].name!r}")  # fmt: skip
        return Revoked(revoked, 0, kept, None, api_keys)
    deleted = delete_scram_credentials(config, _user(left.tenant))
    return Revoked(revoked, deleted, None, _forget_properties(settings, left.tenant), api_keys)


_OFFSETS_SETTLE_S = 10.0


def _offsets_left(config: dict[str, str], topics: tuple[str, ...], prefix: str) -> tuple[str, ...]:
    """Committed offsets still on the deleted topics; Kafka drops them as it deletes the partitions: waits for it."""
    deadline = time.monotonic() + _OFFSETS_SETTLE_S
    while True:
        left = committed_offsets_on(config, topics, f"{prefix}-")
        if not left or time.monotonic() > deadline:
            return tuple(left)
        time.sleep(0.5)


def _forget_properties(settings: Settings, tenant: str) -> Path | None:
    """Deletes the local broker's properties files of the tenant's principal (its password), if there are any."""
    path, java = credential_files(credentials_dir(settings.paths.home), _user(tenant))
    java.unlink(missing_ok=True)
    if not path.exists():
        return None
    path.unlink()
    return path


def unplanned(settings: Settings, roles: list[Role], tenants: list[str], *, other_mode: bool = False) -> list[Grant]:
    """The cluster's grants of `roles`' principals on this pipeline that `dpm acl apply` revokes (none revoked here).

    The plan is this tenancy mode's, for every tenant on the cluster and `tenants`. Kept too, unless
    `other_mode`, is what the other mode's plan gives on the topics that exist: the shared topics' grants
    while they exist, every tenant's while its topics exist (an apply in one mode never stops the
    other's services). With tenancy by topic the producer role is every tenant's principal too.
    """
    names = TopicNames(settings.kafka.topic_prefix)
    config = settings.kafka.client_config()
    on_cluster = cluster_grants(config)
    if on_cluster is None:
        return []
    topics = existing_topics(config)
    by_topic = settings.kafka.tenancy == "topics"
    on_topics = _tenants_in(names, topics)
    desired = plan(names, roles, sorted({*on_topics, *tenants})) if by_topic else plan(names, roles)
    if not other_mode:
        desired += kept_for_live_topics(names, roles, by_topic and names.triggers in topics,
                                        [] if by_topic else on_topics)  # fmt: skip
    managed = {principal(r) for r in roles}
    if by_topic and Role.PRODUCER in roles:
        managed |= {g.principal for g in on_cluster if tenant_of_principal(g.principal) is not None}
    return revocable(on_cluster, desired, managed, names)


def revoke_unplanned(settings: Settings, roles: list[Role], tenants: list[str], *, other_mode: bool = False
                     ) -> list[Grant]:  # fmt: skip
    """Revokes what `unplanned` finds; returns it."""
    gone = unplanned(settings, roles, tenants, other_mode=other_mode)
    revoke_grants(settings.kafka.client_config(), gone)
    return gone


def apply_would_stop(settings: Settings, tenants: list[str]) -> list[tuple[Grant, str]]:
    """The grants `dpm acl apply` (every role, this tenancy mode) would revoke on a topic that exists, with the topic.

    Each is a grant a service's principal holds on a live topic: revoking it stops whatever of that
    service uses the topic by it (the plan changed under a running cluster, or grants made by hand).
    """
    gone = unplanned(settings, list(Role), tenants)
    names = TopicNames(settings.kafka.topic_prefix)
    return on_live_topics(gone, existing_topics(settings.kafka.client_config()), names)
