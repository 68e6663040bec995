"""Settings: every environment variable, read once into typed groups; secrets masked."""

from pipeline.config.settings import (
    DEFAULT_BOOTSTRAP,
    ENVIRONMENT,
    KAFKA_VERSION,
    KafkaSettings,
    MetricsSettings,
    ModelSettings,
    PathSettings,
    Settings,
    SettingsError,
    WorkerSettings,
    read_properties,
)

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "ENVIRONMENT",
    "KAFKA_VERSION",
    "KafkaSettings",
    "MetricsSettings",
    "ModelSettings",
    "PathSettings",
    "Settings",
    "SettingsError",
    "WorkerSettings",
    "read_properties",
]
