"""The settings of a command that needs the broker, once one answers (else a one-line error, fast).

Every such command finds its cluster the same way: DPM_BOOTSTRAP, else the `bootstrap.servers` of
DPM_KAFKA_CONFIG, else the local broker recorded under DPM_HOME (whatever port it was started on),
else the default address.
"""

from __future__ import annotations

from pipeline.config.settings import Settings
from pipeline.kafka import local_broker
from pipeline.kafka.admin import ensure_reachable
from pipeline.kafka.credentials import credentials_dir
from pipeline.kafka.errors import BrokerUnavailableError


def broker_settings() -> Settings:
    """Settings from the environment, after checking that a broker answers at their address."""
    settings = cluster_settings(Settings.from_env())
    ensure_reachable(settings.kafka.client_config())
    return settings


def cluster_settings(settings: Settings) -> Settings:
    """`settings` pointed at the local broker recorded under DPM_HOME when they name no cluster themselves."""
    if settings.kafka.bootstrap_configured:
        return settings
    running = local_broker.read_running(settings.paths.home)
    if running is None:
        return settings
    if running.secure and settings.kafka.client_config_file is None:
        raise BrokerUnavailableError(
            f"the local broker at {running.bootstrap} is secured (SASL over TLS): set DPM_KAFKA_CONFIG to a "
            f"role's client properties, one of {credentials_dir(settings.paths.home)}/<role>.properties"
        )
    return settings.with_bootstrap(running.bootstrap)
