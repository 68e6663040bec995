"""Applies an ACL plan (acl_plan.py) through the admin API, reads a cluster's grants back, revokes grants."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from pipeline.kafka.cluster.acl_plan import CLUSTER_NAME, Grant, Pattern, Resource
from pipeline.kafka.cluster.admin import admin_client, admin_request, require_cluster_operation
from pipeline.kafka.errors import KafkaAdapterError

_TIMEOUT_S = 30.0
_TYPE = {
    Resource.TOPIC: ResourceType.TOPIC,
    Resource.GROUP: ResourceType.GROUP,
    Resource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
    Resource.CLUSTER: ResourceType.BROKER,  # confluent-kafka's name for the cluster resource
}
_PATTERN = {Pattern.LITERAL: ResourcePatternType.LITERAL, Pattern.PREFIXED: ResourcePatternType.PREFIXED}
_OPERATION = {
    "Read": AclOperation.READ,
    "Write": AclOperation.WRITE,
    "Create": AclOperation.CREATE,
    "Delete": AclOperation.DELETE,
    "Alter": AclOperation.ALTER,
    "Describe": AclOperation.DESCRIBE,
    "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
    "AlterConfigs": AclOperation.ALTER_CONFIGS,
    "All": AclOperation.ALL,
    "IdempotentWrite": AclOperation.IDEMPOTENT_WRITE,
    "ClusterAction": AclOperation.CLUSTER_ACTION,
}
# Read back from a cluster: keyed by object, as confluent-kafka types a binding's fields loosely (enum, str or int).
_GRANT_OPERATION: dict[object, str] = {operation: name for name, operation in _OPERATION.items()}
_RESOURCE: dict[object, Resource] = {kind: resource for resource, kind in _TYPE.items()}
_GRANT_PATTERN: dict[object, Pattern] = {kind: pattern for pattern, kind in _PATTERN.items()}


def bindings(grants: Iterable[Grant]) -> list[AclBinding]:
    """One binding per operation of each grant, allowed from any host."""
    return [
        AclBinding(
            _TYPE[g.resource],
            CLUSTER_NAME if g.resource is Resource.CLUSTER else g.name,
            _PATTERN[g.pattern],
            g.principal,
            "*",
            _OPERATION[op],
            AclPermissionType.ALLOW,
        )
        for g in grants
        for op in g.operations
    ]


def apply_grants(admin_config: dict[str, str], grants: Iterable[Grant]) -> int:
    """Creates every binding of `grants` (existing ones are kept as they are); returns how many were sent."""
    wanted = bindings(grants)
    if not wanted:
        return 0
    admin_request(admin_config, lambda admin: admin.create_acls(wanted, request_timeout=_TIMEOUT_S),
                  failed="could not apply ACLs", refused=lambda binding: f"the ACL {binding}")  # fmt: skip
    return len(wanted)


def cluster_grants(admin_config: dict[str, str]) -> list[Grant] | None:
    """Every ALLOW binding on the cluster as a one-operation grant; None when the cluster has no authorizer.

    Raises NotAuthorizedError when the principal may not describe the cluster's ACLs.
    """
    require_cluster_operation(admin_config, "DESCRIBE", "reading the cluster's ACLs")
    # None matches any name, principal and host (the stubs type them str only).
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    admin = admin_client(admin_config)  # referenced until its future is done: they fail once it is gone
    try:
        found = admin.describe_acls(everything, request_timeout=_TIMEOUT_S).result(_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.SECURITY_DISABLED:
            return None
        raise KafkaAdapterError(f"could not read the cluster's ACLs: {error}") from exc
    return [grant for binding in found if (grant := _grant(binding)) is not None]


def _grant(binding: AclBinding) -> Grant | None:
    """A binding as a grant; None for a DENY, or a resource, pattern or operation no plan speaks of."""
    resource = _RESOURCE.get(binding.restype)
    pattern = _GRANT_PATTERN.get(binding.resource_pattern_type)
    operation = _GRANT_OPERATION.get(binding.operation)
    if binding.permission_type != AclPermissionType.ALLOW or resource is None or pattern is None or operation is None:
        return None
    name = CLUSTER_NAME if resource is Resource.CLUSTER else str(binding.name)
    return Grant(str(binding.principal), resource, name, pattern, (operation,))


def revoke_grants(admin_config: dict[str, str], grants: Iterable[Grant]) -> int:
    """Deletes every binding of `grants` (exactly those: principal, resource, pattern, operation); returns how many."""
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings(grants)]  # fmt: skip
    if not filters:
        return 0
    admin_request(admin_config, lambda admin: admin.delete_acls(filters, request_timeout=_TIMEOUT_S),
                  failed="could not remove ACLs", refused=lambda binding: f"removing the ACL {binding}")  # fmt: skip
    return len(filters)
