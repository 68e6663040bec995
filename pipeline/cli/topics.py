"""`dpm topics`: create, inspect and grow the pipeline's topics."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.kafka.cluster.layout import read_layout, recorded_layout
from pipeline.kafka.cluster.topics import ErasureBound, TopicNames, create_pipeline_topics
from pipeline.services.growth import migrate_contests

app = typer.Typer(help="The pipeline's Kafka topics.", no_args_is_help=True)
_out = output_console()


@app.command()
def create(
    partitions: int | None = typer.Option(
        None, "--partitions", min=1, help="Partitions per topic (default: the recorded layout's, else 6)."
    ),
    replication: int | None = typer.Option(
        None, "--replication", min=1, help="Replication factor (default: min(3, brokers))."
    ),
) -> None:
    """Create the topics of the pipeline idempotently; refuse existing topics with conflicting settings.

    On a pipeline that has grown, the current generation's topics are checked with their recorded count.
    """
    settings = broker_settings()
    config = settings.kafka.client_config()
    base = TopicNames(settings.kafka.topic_prefix)
    layout = read_layout(config, base)
    names = base.of_generation(layout.generation if layout is not None else 1)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    count = partitions or (layout.partitions if layout is not None else 6)
    report = create_pipeline_topics(config, names, count, replication, bound)
    for name in report.created:
        _out.print(f"created {name}")
    drifted = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in report.drift}
    for name in report.existing:
        if name in drifted:
            _out.print(f"exists  {name} (drift: {drifted[name]}; alter the topic's configs to apply)")
        else:
            _out.print(f"exists  {name} (settings match)")
    if settings.kafka.tenancy != "topics":
        recorded = recorded_layout(config, base)
        _out.print(f"layout  generation {recorded.generation} of {base.scope}*, {recorded.partitions} partitions")


@app.command()
def grow(
    partitions: int = typer.Option(..., "--partitions", min=2, help="Partitions of the new generation."),
    settle_s: float = typer.Option(
        5.0, "--settle", min=0.0, help="Seconds the inputs must stay unchanged (producers stopped)."
    ),
) -> None:
    """Take the topics partitioned by case to more partitions: a new generation, the events and keys copied in order.

    Run it on a quiet pipeline (producers stopped, every trigger decided); workers and baseline members
    stop when it finishes and are restarted on the new generation. Old decisions keep replaying against
    the generation they read. See docs/how-to/upgrade.md.
    """
    from pipeline.services.growth import grow as grow_topics

    settings = broker_settings()
    growth = grow_topics(settings, partitions, settle_s=settle_s, progress=_out.print)
    _out.print(f"grew {growth.scope}* from {growth.from_partitions} to {growth.to_partitions} partitions "
               f"(generation {growth.from_generation} -> {growth.to_generation}): {growth.events_copied} events, "
               f"{growth.keys_copied} case keys copied in {growth.seconds:.1f} s; restart producers, workers and "
               "baseline members that have not stopped on their own")  # fmt: skip


@app.command("migrate-contests")
def migrate_contests_command() -> None:
    """Give each contests topic as many partitions as its decisions topic (made before the lookup index); idempotent.

    Partitions are added in place: contests are found through the lookup index, never by partition.
    """
    migrated = migrate_contests(broker_settings())
    for done in migrated:
        _out.print(f"{done.topic}: {done.before} -> {done.after} partitions")
    if not migrated:
        _out.print("every contests topic has its decisions topic's partitions already")
