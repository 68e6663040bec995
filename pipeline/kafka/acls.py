"""Applies an ACL plan (acl_plan.py) through the admin API."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from pipeline.kafka.acl_plan import CLUSTER_NAME, Grant, Pattern, Resource
from pipeline.kafka.admin import admin_request

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
}


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
