"""`dpm topics`: create and inspect the pipeline's topics."""

from __future__ import annotations

import typer

from pipeline.cli.reach import broker_settings
from pipeline.cli.render import output_console
from pipeline.kafka.topics import ErasureBound, TopicNames, create_pipeline_topics

app = typer.Typer(help="The pipeline's Kafka topics.", no_args_is_help=True)
_out = output_console()


@app.command()
def create(
    partitions: int = typer.Option(6, "--partitions", min=1, help="Partitions per topic."),
    replication: int | None = typer.Option(
        None, "--replication", min=1, help="Replication factor (default: min(3, brokers))."
    ),
) -> None:
    """Create the topics of the pipeline idempotently; refuse existing topics with conflicting settings."""
    settings = broker_settings()
    names = TopicNames(settings.kafka.topic_prefix)
    bound = ErasureBound(settings.keys.erasure_lag_ms, settings.keys.tombstone_retention_ms)
    report = create_pipeline_topics(settings.kafka.client_config(), names, partitions, replication, bound)
    for name in report.created:
        _out.print(f"created {name}")
    drifted = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in report.drift}
    for name in report.existing:
        if name in drifted:
            _out.print(f"exists  {name} (drift: {drifted[name]}; alter the topic's configs to apply)")
        else:
            _out.print(f"exists  {name} (settings match)")
