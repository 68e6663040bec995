"""Runtime settings from the environment, with embedded defaults for a local run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import DpmError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
KAFKA_VERSION = "3.9.2"


# Every environment variable the processes read, with what it sets. Deployment files may only use
# these (a test checks the manifests and the compose file against this table).
ENVIRONMENT: dict[str, str] = {
    "DPM_BOOTSTRAP": "Kafka bootstrap servers (unset: the local broker)",
    "DPM_TOPIC_PREFIX": "prefix of the six topic names",
    "DPM_HOME": "local state: broker data, baseline data dirs",
    "DPM_CACHE_DIR": "where the broker jars are cached",
    "DPM_KAFKA_CONFIG": "properties file of extra librdkafka settings (SASL, TLS)",
    "DPM_BACKEND": "model backend: extractive or anthropic",
    "DPM_MODEL": "model id for the anthropic backend",
    "ANTHROPIC_API_KEY": "API key of the anthropic backend",
    "ANTHROPIC_BASE_URL": "Messages API base URL (a gateway or proxy)",
    "DPM_PRICE_TABLE": "JSON price table overriding list prices",
    "DPM_MODEL_TIMEOUT_S": "model call timeout",
    "DPM_MODEL_MAX_RETRIES": "model call retries (429, 529, 5xx, connection errors)",
    "DPM_SESSION_TIMEOUT_MS": "consumer group session timeout of the workers",
    "DPM_TRANSACTION_TIMEOUT_MS": "Kafka transaction timeout of the workers",
    "DPM_METRICS_PORT": "port of /metrics (-1: off)",
    "DPM_METRICS_ADDR": "address /metrics binds to",
    "DPM_METRICS_TENANTS": "tenants that get their own metric label (others: other)",
}


class SettingsError(DpmError):
    """A setting is missing or malformed."""


def read_properties(path: Path) -> dict[str, str]:
    """Reads a Java-style `key=value` client properties file (comments with #, blank lines ignored)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SettingsError(f"cannot read Kafka client config {path}: {exc.strerror}") from exc
    props: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise SettingsError(f"{path}:{number}: expected key=value, got {raw!r}")
        props[key.strip()] = value.strip()
    return props


@dataclass(frozen=True)
class Settings:
    """Where the broker is, how topics are named and where local state lives.

    Environment: DPM_BOOTSTRAP, DPM_TOPIC_PREFIX, DPM_HOME, DPM_CACHE_DIR and
    DPM_KAFKA_CONFIG (a properties file of extra librdkafka settings, e.g. SASL/TLS
    for an existing cluster).
    """

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    topic_prefix: str = "dpm"
    home: Path = field(default_factory=lambda: Path.home() / ".local" / "share" / "dpm")
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "dpm")
    kafka_client_config: dict[str, str] = field(default_factory=dict)
    kafka_version: str = KAFKA_VERSION
    bootstrap_configured: bool = False  # True when the user named a cluster instead of the local default

    def client_config(self) -> dict[str, str]:
        """Base librdkafka configuration shared by every producer, consumer and admin client."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_client_config}

    @classmethod
    def from_env(cls) -> Settings:
        """Builds settings from DPM_* variables, falling back to the embedded defaults."""
        env = os.environ
        defaults = cls()
        extra_path = env.get("DPM_KAFKA_CONFIG")
        return cls(
            bootstrap_servers=env.get("DPM_BOOTSTRAP", defaults.bootstrap_servers),
            topic_prefix=env.get("DPM_TOPIC_PREFIX", defaults.topic_prefix),
            home=Path(env["DPM_HOME"]) if env.get("DPM_HOME") else defaults.home,
            cache_dir=Path(env["DPM_CACHE_DIR"]) if env.get("DPM_CACHE_DIR") else defaults.cache_dir,
            kafka_client_config=read_properties(Path(extra_path)) if extra_path else {},
            bootstrap_configured=bool(env.get("DPM_BOOTSTRAP")),
        )
