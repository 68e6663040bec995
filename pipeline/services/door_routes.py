"""Which door appends a case's steps: the one whose group membership owns the case's events partition.

A door (`dpm api`, `dpm mcp --http`) asks `owner()` before it appends: None means this door owns
the partition (or nobody does yet: a topic the group has not seen), a URL is the door to forward
the append to, over the HTTP API (`POST /v1/cases/{id}/events`, the caller's own API key, so
the owner checks the tenant as if it had been asked itself). An append forwarded once is
appended where it lands (`Via`), never forwarded again: ownership routes work, the sequencers'
fencing is what keeps a case whole, so a door that lost the partition meanwhile hands it over.

While the group rebalances, a partition without a known owner waits a moment for one (a
cooperative rebalance moves a partition in two steps), then is appended here: a door that joins
a group holding a killed member waits for that member's session to time out before it is given
partitions, and appends must not wait that long. An owner that refuses the connection (killed,
not yet timed out of the group) has written nothing: the append is made here too, taking the
partition over. Either way the append itself is bounded by DPM_API_BROKER_WAIT_S, as any.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.topics import TopicNames
from pipeline.kafka.writing.door_group import DoorGroups

_LOG = logging.getLogger("pipeline.doors")
VIA = "1.1 dpm-door"  # RFC 9110 Via: what a forwarding door adds, and how the owner knows not to forward again
_FORWARDED_HEADERS = ("authorization", "content-type", "idempotency-key", "if-match")
_ANSWER_HEADERS = ("content-type", "etag", "retry-after", "location")
_SETTLE_POLL_S = 0.05
SETTLE_WAIT_S = 1.0
_IDLE_S = 4.0  # how long a connection to another door is kept idle (below uvicorn's keep-alive of 5 s)
WARN_EVERY_S = 30.0  # how long an append waits for its partition to be given an owner during a rebalance


class ForwardFailedError(DpmError):
    """The owner took the append but its answer was lost: it may have been written (retry with the same key)."""


@dataclass(frozen=True)
class Forwarded:
    """The owner's answer, passed back as it came."""

    status: int
    headers: dict[str, str]
    body: bytes


def door_url(addr: str, port: int) -> str:
    """The URL other doors reach a door bound to `addr:port` at (the host's address for 0.0.0.0 and ::)."""
    host = addr
    if addr in ("0.0.0.0", "::", ""):  # noqa: S104 - naming the wildcard, not binding it
        host = socket.gethostbyname(socket.gethostname())
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def was_forwarded(headers: Mapping[str, str]) -> bool:
    """Whether a request came from another door (its Via), so it is appended here, never forwarded again."""
    return VIA in headers.get("via", "")


class Doors(Protocol):
    """What a door asks before it appends: the owner of a partition, and that owner's answer."""

    async def owner(self, topic: str, partition: int) -> str | None: ...

    async def forward(self, owner: str, path: str, body: bytes, headers: Mapping[str, str]) -> Forwarded | None: ...


class DoorRoutes:
    """This door's memberships of the doors' groups, and its connections to the other doors (a Doors)."""

    def __init__(self, groups: DoorGroups, wait_s: float) -> None:
        self.groups = groups
        self._warned: dict[str, float] = {}  # an unreachable owner's URL -> when that was last logged
        # the owner's append waits up to the same bound for the cluster, then answers: a little more here
        self._timeout = aiohttp.ClientTimeout(total=wait_s + 5.0, sock_connect=2.0)
        self._http: aiohttp.ClientSession | None = None  # made on the event loop that forwards

    @classmethod
    def join(cls, settings: Settings, url: str) -> DoorRoutes:
        """This door, at `url`, joined to the doors' group of the pipeline DPM_* names (per tenant: at first use)."""
        groups = DoorGroups(settings.kafka.client_config(), TopicNames(settings.kafka.topic_prefix),
                            by_topic=settings.kafka.tenancy == "topics", url=url.rstrip("/"),
                            session_timeout_ms=settings.api.door_session_timeout_ms)  # fmt: skip
        return cls(groups, settings.api.broker_wait_s)

    async def owner(self, topic: str, partition: int) -> str | None:
        """The URL of the door to forward the partition's appends to; None: append here.

        Here when this door owns it, when the group is settled and nobody does (a topic the group
        does not divide yet: a tenant's made a moment ago), or when no owner came within SETTLE_WAIT_S.
        """
        group = self.groups.for_topic(topic)  # a tenant's first: its group is joined (no wait: a thread of its own)
        deadline = time.monotonic() + SETTLE_WAIT_S
        while True:
            view = group.view()
            owner = view.owner(topic, partition)
            if owner is not None:
                return None if owner == group.url else owner
            if view.settled or time.monotonic() >= deadline:
                return None
            await asyncio.sleep(_SETTLE_POLL_S)

    async def forward(self, owner: str, path: str, body: bytes, headers: Mapping[str, str]) -> Forwarded | None:
        """The owner's answer to the request; None when the owner refused the connection (append here).

        aiohttp, not httpx: with httpx a forwarded append cost the forwarding door twice the CPU of
        the append itself (the writes benchmark's replica rows).
        """
        sent: dict[str, str] = {}
        for name, value in headers.items():  # a header sent twice: its first, as the owner's admission reads it
            if name.lower() in _FORWARDED_HEADERS:
                sent.setdefault(name.lower(), value)
        sent["via"] = VIA
        try:
            async with self._session().post(f"{owner}{path}", data=body, headers=sent) as answer:
                kept = {name: answer.headers[name] for name in _ANSWER_HEADERS if name in answer.headers}
                return Forwarded(answer.status, kept, await answer.read())
        except (aiohttp.ClientConnectorError, aiohttp.InvalidURL):  # refused, not resolved or no URL: nothing sent
            if time.monotonic() - self._warned.get(owner, -WARN_EVERY_S) >= WARN_EVERY_S:  # once a while per owner
                self._warned[owner] = time.monotonic()
                _LOG.warning("the door at %s refused the connection; appending its partitions' cases here", owner)
            return None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ForwardFailedError("the door that owns the case took the append and did not answer; it may have "
                                     "been written: retry with the same Idempotency-Key, which never writes "
                                     "twice") from exc  # fmt: skip

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            # Idle connections closed before the owner closes them (uvicorn: after 5 s), so that a forward never
            # meets a connection closing under it: aiohttp does not send a POST again on another one.
            connector = aiohttp.TCPConnector(limit=256, keepalive_timeout=_IDLE_S)
            self._http = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self._http

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()
        await asyncio.to_thread(self.groups.close)
