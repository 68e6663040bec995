"""`dpm topics grow`: more partitions for the topics partitioned by case, without moving a case's history.

Adding partitions in place moves most cases to another partition (murmur2 of `tenant/case` modulo
the count), so their later records land apart from their earlier ones. A growth makes a new
generation of the case-partitioned topics instead (`<name>-g<k>`, the new count) and copies the
events and the case keys into it, partition by partition in offset order: a case's records all
come from one old partition and go to one new one, so its order holds. Then the layout record
names the new generation, and every process follows it (workers and baseline members stop and are
restarted on it; producers resolve it when they start).

Nothing is moved out of the old generation: it stays as it was, because decisions recorded
offsets of its events topic (`events_topic` in the decision, or the first generation for records
without one), and replay reads them there. Erasure tombstones every generation.

A growth runs on a quiet pipeline: producers stopped, every trigger decided. It checks both
(and refuses otherwise), since a record written to the old generation after the copy would be
read by nobody. Triggers are not copied (there are none pending); segment views are not either
(a cache: workers project them again on the new generation when they are needed).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.kafka.cluster.admin import admin_client, fetch_metadata
from pipeline.kafka.cluster.generations import Progress, copy_by_case, end_offsets, undecided
from pipeline.kafka.cluster.layout import recorded_layout, write_layout
from pipeline.kafka.cluster.topics import (
    ErasureBound,
    TopicNames,
    add_partitions,
    delete_topics,
    ensure_topics,
    partition_counts,
    pipeline_topics,
)
from pipeline.services.tenants import topic_scopes


@dataclass(frozen=True)
class Growth:
    """What one growth did."""

    scope: str
    from_generation: int
    to_generation: int
    from_partitions: int
    to_partitions: int
    events_copied: int
    keys_copied: int
    seconds: float


def _groups(settings: Settings, names: TopicNames) -> tuple[str, ...]:
    """The consumer groups that decide the triggers of `names`: projection workers and the Summ-only baseline."""
    return (f"{settings.kafka.topic_prefix}-projection", names.baseline_app)


def _quiet(config: dict[str, str], names: TopicNames, partitions: int, settle_s: float) -> list[str]:
    """Problems if producers still write: the inputs' ends must not move for `settle_s`."""
    topics = (names.events, names.triggers, names.keys)
    before = {t: end_offsets(config, t, partitions) for t in topics}
    time.sleep(settle_s)
    after = {t: end_offsets(config, t, partitions) for t in topics}
    return [f"{t} grew by {sum(after[t].values()) - sum(before[t].values())} record(s) in {settle_s:g} s: "
            "stop the producers first" for t in topics if after[t] != before[t]]  # fmt: skip


def grow(settings: Settings, partitions: int, *, settle_s: float = 5.0, progress: Progress = print) -> Growth:
    """Takes the shared case-partitioned topics to `partitions` in a new generation; see the module docstring."""
    if settings.kafka.tenancy == "topics":
        raise DpmError(
            "dpm topics grow covers the shared topics; with tenancy by topic, onboard tenants with the "
            "partitions they need (dpm tenants add --partitions): their growth is not supported yet"
        )
    started = time.monotonic()
    config = settings.kafka.client_config()
    base = TopicNames(settings.kafka.topic_prefix)
    replication = min(3, len(fetch_metadata(config).broker_ids))
    ensure_topics(admin_client(config), tuple(s for s in pipeline_topics(base) if s.name == base.layout), replication)
    layout = recorded_layout(config, base)
    if partitions <= layout.partitions:
        raise DpmError(f"{base.scope}* has {layout.partitions} partitions: a growth needs more, not {partitions}")
    old, new = base.of_generation(layout.generation), base.of_generation(layout.generation + 1)
    waiting = undecided(config, old.triggers, layout.partitions, _groups(settings, old))
    problems = [f"group {group} has {count} trigger(s) of {old.triggers} not decided yet"
                for group, count in waiting.items() if count]  # fmt: skip
    problems += _quiet(config, old, layout.partitions, settle_s)
    if problems:
        raise DpmError("the pipeline is not quiet, nothing was changed: " + "; ".join(problems))
    leftovers = [t for t in new.case_partitioned() if t in partition_counts(config)]
    if leftovers:  # an earlier growth that stopped before its layout was written: nobody reads them
        progress(f"deleting {', '.join(leftovers)} left by an unfinished growth")
        delete_topics(config, leftovers)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    specs = tuple(s for s in pipeline_topics(new, partitions, bound) if s.name in new.case_partitioned())
    ensure_topics(admin_client(config), specs, replication)
    progress(f"created {', '.join(s.name for s in specs)} with {partitions} partitions")
    events = copy_by_case(config, old.events, new.events, partitions, progress)
    keys = copy_by_case(config, old.keys, new.keys, partitions, progress)
    progress(f"copied {events} events and {keys} case keys")
    write_layout(config, base, layout.grown(partitions, events, dt.datetime.now(tz=dt.UTC)))
    progress(f"generation {new.generation} of {base.scope}* is current")
    return Growth(base.scope, old.generation, new.generation, layout.partitions, partitions, events, keys,
                  time.monotonic() - started)  # fmt: skip


@dataclass(frozen=True)
class ContestsMigrated:
    """A contests topic taken from `before` partitions to `after` (its scope's decisions topic's count)."""

    topic: str
    before: int
    after: int


def migrate_contests(settings: Settings) -> list[ContestsMigrated]:
    """Gives every contests topic (the shared one, or each tenant's own) as many partitions as its decisions topic.

    A pipeline made before the lookup index kept its contests on one partition. Adding partitions in
    place is safe for contests: they are found through the index by where they are, never by
    partition; nothing is moved. Idempotent: a topic that has its count already is left alone.
    """
    config = settings.kafka.client_config()
    counts = partition_counts(config)
    migrated = []
    for scope in topic_scopes(settings):
        have, want = counts.get(scope.contests), counts.get(scope.decisions)
        if have is not None and want is not None and have < want:
            add_partitions(config, scope.contests, want)
            migrated.append(ContestsMigrated(scope.contests, have, want))
    return migrated
