"""With tenancy by topic, a door acts for a key's tenant only once the tenant's topics are on the cluster.

A tenant's API key may exist before `dpm tenants add` made its topics, or outlive them: the doors
then answer as for anything unknown (HTTP 404, an MCP tool error), never as a broken cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.admin import topic_exists
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.errors import KafkaAdapterError

_Client = TypeVar("_Client")


class TenantNotOnClusterError(DpmError):
    """The key's tenant has no topics on this cluster (tenancy by topic): nothing of it can be read or written."""


def gated(settings: Settings, open_client: Callable[[str], Awaitable[_Client]]) -> Callable[[str], Awaitable[_Client]]:
    """`open_client(tenant)`, refused with TenantNotOnClusterError while the tenant has no topics (tenancy by topic).

    A tenant found is remembered for the process (one metadata request, not one per call); one not
    found is asked about again on its next call, so a tenant added meanwhile is served.
    """
    if settings.kafka.tenancy != "topics":
        return open_client
    found: set[str] = set()
    names = TopicNames(settings.kafka.topic_prefix)

    async def open_gated(tenant: str) -> _Client:
        if tenant not in found:
            topic = names.of_tenant(tenant).events
            try:
                exists = await asyncio.to_thread(topic_exists, settings.kafka.client_config(), topic)
            except KafkaAdapterError:
                return await open_client(tenant)  # the cluster not answering: the client's own call says so
            if not exists:
                raise TenantNotOnClusterError("this key's tenant has no topics on this cluster (tenancy by topic): "
                                              "an operator adds them with `dpm tenants add <tenant>`")  # fmt: skip
            found.add(tenant)
        return await open_client(tenant)

    return open_gated
