"""The settings of a command that needs the broker, once one answers (else a one-line error, fast)."""

from __future__ import annotations

from pipeline.config.settings import Settings
from pipeline.kafka.admin import ensure_reachable


def broker_settings() -> Settings:
    """Settings from the environment, after checking that a broker answers at their address."""
    settings = Settings.from_env()
    ensure_reachable(settings.kafka.client_config())
    return settings
