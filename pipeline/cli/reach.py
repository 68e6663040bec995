"""The settings of a command that needs the broker, once one answers (else a one-line error, fast).

Every such command finds its cluster the same way: DPM_BOOTSTRAP, else the `bootstrap.servers` of
DPM_KAFKA_CONFIG, else the local broker recorded under DPM_HOME (whatever port it was started on),
else the default address.
"""

from __future__ import annotations

from pipeline.config.settings import Settings
from pipeline.kafka.cluster.admin import ensure_reachable
from pipeline.services.cluster import cluster_settings


def broker_settings() -> Settings:
    """Settings from the environment, after checking that a broker answers at their address."""
    settings = cluster_settings(Settings.from_env())
    ensure_reachable(settings.kafka.client_config())
    return settings
