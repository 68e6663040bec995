"""`dpm demo`: the main job end to end on the embedded defaults."""

from __future__ import annotations

from rich.console import Console

from pipeline.kafka import local_broker
from pipeline.kafka.admin import admin_client, fetch_metadata
from pipeline.kafka.topics import TopicNames, ensure_topics, pipeline_topics
from pipeline.settings import Settings

_out = Console()


def demo() -> None:
    """Start the local broker unless DPM_BOOTSTRAP names one, create the topics, stop what was started."""
    settings = Settings.from_env()
    started = False
    bootstrap = settings.bootstrap_servers
    if not settings.bootstrap_configured:
        with _out.status("starting the local Kafka broker"):
            cluster, already = local_broker.start(
                settings.home, settings.cache_dir, settings.kafka_version, nodes=1, port=9092
            )
        started, bootstrap = not already, cluster.bootstrap
    try:
        config = {**settings.client_config(), "bootstrap.servers": bootstrap}
        info = fetch_metadata(config)
        specs = pipeline_topics(TopicNames(settings.topic_prefix))
        report = ensure_topics(admin_client(config), specs, min(3, len(info.broker_ids)))
        _out.print(f"broker {bootstrap}: {len(report.created)} topic(s) created, {len(report.existing)} present")
    finally:
        if started:
            local_broker.stop(settings.home)
            _out.print("stopped the local broker this demo started")
