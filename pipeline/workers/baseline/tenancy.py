"""Which topics the baseline reads and answers on: the shared ones, or every tenant's own (tenancy by topic).

faust subscribes to topic names, never to a pattern, so with tenancy by topic the baseline lists
the cluster's topics every REFRESH_S and subscribes to a tenant's events, triggers and keys topics
once all three exist. They must have as many partitions as the baseline's tables: a case's
summaries are kept in the changelog partition of its events partition's number, which faust
assigns to the member reading that events partition only when the two counts agree
(co-partitioning). A tenant whose topics disagree is left out, and said so once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pipeline.kafka.cluster.topics import TopicNames

REFRESH_S = 10.0  # how often the cluster's topics are listed for tenants onboarded or removed
Kind = Literal["events", "triggers", "keys"]
KINDS: tuple[Kind, ...] = ("events", "triggers", "keys")


@dataclass
class BaselineInputs:
    """The topics of each kind the baseline reads now, and the scope (topic names) each record answers on."""

    names: TopicNames
    by_topic: bool
    partitions: int
    tenants: tuple[str, ...] = ()
    _reported: set[str] = field(default_factory=set, init=False, repr=False)

    def scope(self, tenant: str) -> TopicNames:
        """The topics of `tenant`'s records: its own, or the shared ones."""
        return self.names.of_tenant(tenant) if self.by_topic else self.names

    def scope_of(self, topic: str) -> TopicNames:
        """The topics a record read from `topic` answers on: its tenant's own, or the shared ones."""
        tenant = self.names.tenant_of(topic) if self.by_topic else None
        return self.names.of_tenant(tenant) if tenant is not None else self.names

    def tenant_of(self, topic: str) -> str | None:
        """The tenant whose own topic `topic` is (the broker authorized its writer), None for a shared topic."""
        return self.names.tenant_of(topic) if self.by_topic else None

    def topics(self, kind: Kind) -> list[str]:
        """Every topic of `kind` read now."""
        scopes = [self.names.of_tenant(t) for t in self.tenants] if self.by_topic else [self.names]
        return [getattr(scope, kind) for scope in scopes]

    def inputs(self) -> set[str]:
        """The events and triggers topics read now (the table changelogs and keys topics aside)."""
        return {*self.topics("events"), *self.topics("triggers")}

    def update(self, counts: Mapping[str, int]) -> tuple[bool, list[str]]:
        """Takes the tenants whose three input topics exist with the tables' partition count.

        Returns whether the tenants read changed, and a line for each tenant newly left out.
        """
        found = sorted({t for topic in counts if (t := self.names.tenant_of(topic)) is not None})
        usable, problems = [], []
        for tenant in found:
            scope = self.names.of_tenant(tenant)
            have = {kind: counts.get(getattr(scope, kind)) for kind in KINDS}
            if any(n is None for n in have.values()):
                continue  # being onboarded (or removed): taken once all three exist
            wrong = {kind: n for kind, n in have.items() if kind != "keys" and n != self.partitions}
            if not wrong:
                usable.append(tenant)
                self._reported.discard(tenant)
            elif tenant not in self._reported:
                self._reported.add(tenant)
                problems.append(f"tenant {tenant!r} is left out: its topics have {wrong} partitions, "
                                f"the baseline's tables {self.partitions} (DPM_TENANT_PARTITIONS)")  # fmt: skip
        changed = tuple(usable) != self.tenants
        self.tenants = tuple(usable)
        return changed, problems
