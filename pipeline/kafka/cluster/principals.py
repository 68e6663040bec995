"""A principal's SCRAM credentials, and the consumer groups' committed offsets, through the admin API."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import (
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
)

from pipeline.kafka.cluster.admin import admin_client, require_cluster_operation
from pipeline.kafka.errors import KafkaAdapterError

_TIMEOUT_S = 30.0


def _code(exc: KafkaException) -> int | None:
    error = exc.args[0] if exc.args else None
    return int(error.code()) if isinstance(error, KafkaError) else None


def scram_mechanisms(admin_config: dict[str, str], user: str) -> list[ScramMechanism]:
    """The SCRAM mechanisms `user` has a credential for on the cluster (none: an empty list)."""
    require_cluster_operation(admin_config, "DESCRIBE", f"asking for the credential of {user!r}")
    admin = admin_client(admin_config)  # referenced until its futures are done: they fail once it is gone
    try:
        futures = admin.describe_user_scram_credentials([user], request_timeout=_TIMEOUT_S)
        if not isinstance(futures, dict):  # named users: one future each
            raise KafkaAdapterError(f"unexpected answer describing the credential of {user!r}")
        description = futures[user].result(_TIMEOUT_S)
    except KafkaException as exc:
        if _code(exc) == KafkaError.RESOURCE_NOT_FOUND:
            return []
        raise KafkaAdapterError(f"could not ask the cluster for the credential of {user!r}: {exc.args[0]}") from exc
    return [info.mechanism for info in description.scram_credential_infos]


def delete_scram_credentials(admin_config: dict[str, str], user: str) -> int:
    """Deletes every SCRAM credential of `user` (its password stops working at once); returns how many."""
    mechanisms = scram_mechanisms(admin_config, user)
    if not mechanisms:
        return 0
    deletions: list[UserScramCredentialAlteration] = [UserScramCredentialDeletion(user, m) for m in mechanisms]
    admin = admin_client(admin_config)
    try:
        for future in admin.alter_user_scram_credentials(deletions, request_timeout=_TIMEOUT_S).values():
            future.result(_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaAdapterError(f"the cluster refused to delete the credential of {user!r}: {exc.args[0]}") from exc
    return len(mechanisms)


def committed_offsets_on(admin_config: dict[str, str], topics: Iterable[str], group_prefix: str) -> list[str]:
    """`group topic[partition]` for each offset a group whose id starts with `group_prefix` has committed on `topics`.

    Kafka drops a deleted topic's committed offsets itself; this is how a removal proves it did.
    """
    wanted = set(topics)
    admin = admin_client(admin_config)
    try:
        groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=_TIMEOUT_S).result(_TIMEOUT_S).valid
                  if g.group_id.startswith(group_prefix)]  # fmt: skip
        found = []
        for group in groups:
            request = [ConsumerGroupTopicPartitions(group)]
            listed = admin.list_consumer_group_offsets(request, request_timeout=_TIMEOUT_S)[group].result(_TIMEOUT_S)
            found += [f"{group} {tp.topic}[{tp.partition}]" for tp in listed.topic_partitions or []
                      if tp.topic in wanted and tp.offset >= 0]  # fmt: skip
    except KafkaException as exc:
        raise KafkaAdapterError(f"could not list the committed offsets of the groups {group_prefix}*: {exc}") from exc
    return found
