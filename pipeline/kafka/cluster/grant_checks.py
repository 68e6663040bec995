"""Checks on ACL grants: that none reaches another tenant's topics, which tenant ids would collide, what to revoke.

Pure functions over `Grant`s (acl_plan.py), whether planned or read back from a cluster
(acls.cluster_grants). The services of the pipeline (worker, baseline, auditor, operator) and the
admin serve every tenant by design; every other principal is held to this: a tenant's principal
(`User:tenant-<t>`) reaches only its own topics, and any other principal (the shared mode's agents,
`User:producer`, or one made by hand) reaches no tenant's own topics at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pipeline.kafka.cluster.acl_plan import Grant, Pattern, Resource, Role, plan, principal
from pipeline.kafka.cluster.admin import READER_GROUP_PREFIX
from pipeline.kafka.cluster.topics import TopicNames

ADMIN_PRINCIPAL = "User:admin"
SERVICES = frozenset({principal(r) for r in (Role.WORKER, Role.BASELINE, Role.AUDITOR, Role.OPERATOR)}
                     | {ADMIN_PRINCIPAL})  # fmt: skip
_TENANT_PRINCIPAL = "User:tenant-"


@dataclass(frozen=True)
class Overlap:
    """A grant that reaches topics its principal has no business with."""

    grant: Grant
    why: str
    tenant: str | None = None  # whose topics it reaches, when it reaches another tenant's

    def __str__(self) -> str:
        g = self.grant
        return f"{g.principal}: {g.resource.value} {g.name!r} ({g.pattern.value}, {'/'.join(g.operations)}) {self.why}"


def tenant_of_principal(who: str) -> str | None:
    """The tenant whose agents' principal `who` is (`User:tenant-<t>`), None for any other principal."""
    return who.removeprefix(_TENANT_PRINCIPAL) if who.startswith(_TENANT_PRINCIPAL) else None


def reaches(grant: Grant, scope: str) -> bool:
    """Whether `grant` allows something on a topic, transactional id or group whose name starts with `scope`.

    A tenant's topics, its sequencers' transactional ids and its doors' group all start with
    `<prefix>.<tenant>.`.
    """
    if grant.resource is Resource.GROUP:
        return grant.name.startswith(scope)
    if grant.resource not in (Resource.TOPIC, Resource.TRANSACTIONAL_ID):
        return False
    if grant.name == "*":
        return True
    if grant.pattern is Pattern.PREFIXED:
        return grant.name.startswith(scope) or scope.startswith(grant.name)
    return grant.name.startswith(scope)


def overlaps(grants: Iterable[Grant], names: TopicNames, tenants: Sequence[str]) -> list[Overlap]:
    """Every grant of `grants` that reaches another tenant's topics, or (a tenant's) anything outside its own.

    `tenants` are every tenant with topics of its own under `names.prefix`; a tenant principal with
    grants but no such tenant is a removed tenant's leftover.
    """
    scopes = {tenant: tenant_scope(names, tenant) for tenant in tenants}
    found: list[Overlap] = []
    for grant in grants:
        if grant.principal in SERVICES:
            continue
        own = tenant_of_principal(grant.principal)
        found += [Overlap(grant, f"reaches the topics of tenant {tenant!r}", tenant)
                  for tenant, scope in scopes.items() if tenant != own and reaches(grant, scope)]  # fmt: skip
        if own is None or not of_pipeline(grant, names):
            continue
        if own not in scopes:
            found.append(Overlap(grant, f"belongs to tenant {own!r}, which has no topics (left by its removal)"))
        elif _scoped(grant) and not grant.name.startswith(scopes[own]):
            found.append(Overlap(grant, f"reaches a {grant.resource.value} outside tenant {own!r}'s own "
                                        f"({scopes[own]}*)"))  # fmt: skip
        elif not _scoped(grant) and not _reader_groups(grant) and not grant.name.startswith(scopes[own]):
            found.append(Overlap(grant, "reaches a group that serves every tenant"))
    return found


def isolation(names: TopicNames, tenants: Sequence[str], applied: Iterable[Grant]) -> list[Overlap]:
    """The overlaps of the plan for every role and tenant, and of the grants `applied` on the cluster."""
    return overlaps([*plan(names, tuple(Role), tenants), *applied], names, tenants)


def _scoped(grant: Grant) -> bool:
    """Whether a grant's resource is named under a tenant's scope when it is the tenant's: topics, writers' ids."""
    return grant.resource in (Resource.TOPIC, Resource.TRANSACTIONAL_ID)


def _reader_groups(grant: Grant) -> bool:
    """The one non-topic grant every principal has: describing the throwaway groups of partition readers."""
    return (grant.resource is Resource.GROUP and grant.name == READER_GROUP_PREFIX
            and grant.pattern is Pattern.PREFIXED and set(grant.operations) <= {"Describe"})  # fmt: skip


def tenant_scope(names: TopicNames, tenant: str) -> str:
    """What every topic of `tenant`'s own starts with: `<prefix>.<tenant>.`.

    Not TopicNames.of_tenant(...).scope: a leftover tenant's id may no longer be a valid one.
    """
    return f"{names.prefix}.{tenant}."


def of_pipeline(grant: Grant, names: TopicNames) -> bool:
    """Whether a grant is on a resource of this pipeline (its prefix), where its plan is the authority."""
    if grant.resource is Resource.CLUSTER:
        return False
    return grant.name.startswith((f"{names.prefix}.", f"{names.prefix}-"))


def colliding_tenant(names: TopicNames, tenant: str) -> str | None:
    """Why `tenant` cannot have topics of its own under `names.prefix` (a shared grant covers them), or None.

    The shared mode's agents are granted the case-partitioned topics by prefix (every generation:
    `<prefix>.events`, `<prefix>.events-g2`, ...) and their case writers' transactional ids
    (`<prefix>.writer.`), so a tenant whose id starts with such a name would have its own topics or
    writers reached by them: `keystone`'s `dpm.keystone.decisions` by `dpm.keys*`.
    """
    scope = tenant_scope(names, tenant)
    shared = [g for g in plan(names, tuple(Role)) if g.principal not in SERVICES and reaches(g, scope)]
    if not shared:
        return None
    return (f"tenant {tenant!r} cannot have topics of its own under {names.prefix!r}: the shared grant on "
            f"{shared[0].name!r} ({shared[0].pattern.value}) would reach {scope}*; choose an id that does not start "
            f"with a shared topic's name")  # fmt: skip


def single_operations(grants: Iterable[Grant]) -> set[Grant]:
    """Each grant split into one grant per operation (what a cluster keeps: one ACL binding each)."""
    return {replace(g, operations=(op,)) for g in grants for op in g.operations}


def revocable(existing: Iterable[Grant], desired: Iterable[Grant], principals: Iterable[str], names: TopicNames
              ) -> list[Grant]:  # fmt: skip
    """The grants on the cluster that the plan no longer gives: of `principals`, on this pipeline's resources.

    What `dpm acl apply` removes after it creates the plan's: the shared mode's grants once a
    cluster moves to tenancy by topic, a removed tenant's, one that an older plan gave. Grants on
    other resources (another pipeline's prefix, the cluster) are left to whoever made them.
    """
    wanted = single_operations(desired)
    managed = set(principals)
    return sorted((g for g in single_operations(existing)
                   if g.principal in managed and of_pipeline(g, names) and g not in wanted),
                  key=lambda g: (g.principal, g.resource.value, g.name, g.operations))  # fmt: skip


def kept_for_live_topics(names: TopicNames, roles: Sequence[Role], shared_live: bool, tenants: Sequence[str]
                         ) -> list[Grant]:  # fmt: skip
    """The grants both tenancy modes' plans give `roles` on the topics that exist: what an apply never revokes.

    The shared topics' (when they exist) and every tenant's own (of `tenants`, those with topics): a
    cluster may run both modes at once (cases decided on the shared topics stay there), and an
    apply in one mode must not stop the other mode's services.
    """
    shared = plan(names, roles) if shared_live else []
    return [*shared, *(plan(names, roles, tenants) if tenants else [])]


def on_live_topics(grants: Iterable[Grant], topics: Iterable[str], names: TopicNames) -> list[tuple[Grant, str]]:
    """Each topic grant that serves a topic in `topics`, with the first such topic (sorted).

    Revoking a service's grant on a topic that exists stops whatever of it uses the topic by that grant.
    A tenant's topic that a shared grant reaches only because the tenant's id starts with a shared
    topic's name (`dpm.keys*` and `dpm.keystone.audit`) is not served by it: that is an overlap,
    which the isolation report names, and revoking the grant stops nothing of that tenant.
    """
    live = sorted(topics)
    found = []
    for grant in grants:
        if grant.resource is not Resource.TOPIC:
            continue
        prefixed = grant.pattern is Pattern.PREFIXED
        hit = next((t for t in live if (grant.name in (t, "*") or (prefixed and t.startswith(grant.name)))
                    and not _by_overlap(grant, t, names)), None)  # fmt: skip
        if hit is not None:
            found.append((grant, hit))
    return found


def _by_overlap(grant: Grant, topic: str, names: TopicNames) -> bool:
    """Whether `grant` reaches a tenant's own `topic` only through a name that runs into the tenant's id."""
    tenant = names.tenant_of(topic)
    if tenant is None or grant.name == "*":
        return False
    scope = tenant_scope(names, tenant)
    at_a_boundary = grant.name.endswith(".") or grant.name == names.prefix
    return not grant.name.startswith(scope) and not (scope.startswith(grant.name) and at_a_boundary)
