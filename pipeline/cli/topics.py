"""`dpm topics`: create and inspect the pipeline's topics."""

from __future__ import annotations

import typer
from rich.console import Console

from pipeline.kafka.admin import admin_client, fetch_metadata
from pipeline.kafka.topics import TopicNames, ensure_topics, pipeline_topics
from pipeline.settings import Settings

app = typer.Typer(help="The pipeline's Kafka topics.", no_args_is_help=True)
_out = Console()


@app.command()
def create(
    partitions: int = typer.Option(6, "--partitions", min=1, help="Partitions per topic."),
    replication: int | None = typer.Option(
        None, "--replication", min=1, help="Replication factor (default: min(3, brokers))."
    ),
) -> None:
    """Create the topics of the pipeline idempotently; refuse existing topics with conflicting settings."""
    settings = Settings.from_env()
    config = settings.client_config()
    info = fetch_metadata(config)
    factor = replication or min(3, len(info.broker_ids))
    report = ensure_topics(admin_client(config), pipeline_topics(TopicNames(settings.topic_prefix), partitions), factor)
    for name in report.created:
        _out.print(f"created {name}")
    for name in report.existing:
        _out.print(f"exists  {name} (settings match)")
