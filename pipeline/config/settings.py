"""Every setting the processes read, loaded once from the environment into typed, documented groups.

This module is the only reader of environment variables. Each field names the variable it maps
to (its alias) and documents it; secrets are `SecretStr`, masked in every repr and log.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from pipeline.core.errors import DpmError
from pipeline.core.prompt import PromptLayout
from pipeline.wire.limits import MAX_TRAJECTORY_CHARS

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
KAFKA_VERSION = "3.9.2"


class SettingsError(DpmError):
    """A setting is missing or malformed."""


def keys_folder(root: Path, prefix: str) -> Path:
    """One pipeline's folder of tenant KEKs under the keys root: `<root>/<topic prefix>`.

    Pipelines never share a tenant's KEK: erasing a tenant in one pipeline (its KEK destroyed), or
    rotating it there, must not touch the same tenant's keys in another.
    """
    return root / prefix


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


def _comma_list(value: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
    """`a, b,c` as ("a", "b", "c"); other values unchanged."""
    return tuple(t.strip() for t in value.split(",") if t.strip()) if isinstance(value, str) else value


_KAFKA_RELEASE = r"^[34]\.\d+\.\d+$"  # the local broker runs Kafka 3.x and 4.x releases


class _Group(BaseModel):
    """A group of settings read from one flat environment mapping (fields name their variables)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class KafkaSettings(_Group):
    """Where the cluster is, how topics are named and the extra client properties (SASL, TLS)."""

    bootstrap_servers: str = Field(
        DEFAULT_BOOTSTRAP,
        validation_alias="DPM_BOOTSTRAP",
        description="Kafka bootstrap servers (unset: the local broker)",
    )
    topic_prefix: str = Field(
        "dpm", validation_alias="DPM_TOPIC_PREFIX", description="prefix of the pipeline's topic names"
    )
    client_config_file: Path | None = Field(
        None,
        validation_alias="DPM_KAFKA_CONFIG",
        description="properties file of extra Kafka client settings (SASL, TLS)",
    )
    # Derived, not read from a variable of their own:
    properties: dict[str, SecretStr] = Field(default_factory=dict)  # the file's properties; values masked
    bootstrap_configured: bool = False  # True when the user named a cluster instead of the local default
    version: str = Field(
        KAFKA_VERSION,
        validation_alias="DPM_KAFKA_VERSION",
        pattern=_KAFKA_RELEASE,
        description="the Apache Kafka release `dpm broker up` runs: 3.9.2 (default) or a 4.x release",
    )
    tenancy: str = Field(
        "shared",
        validation_alias="DPM_TENANCY",
        pattern=r"^(shared|topics)$",
        description="shared: every tenant on the shared topics; topics: each tenant on its own (`dpm tenants add`)",
    )
    tenant_partitions: int = Field(
        6,
        validation_alias="DPM_TENANT_PARTITIONS",
        ge=1,
        description="with DPM_TENANCY=topics: partitions of each tenant's topics (`dpm tenants add`) and of the "
        "baseline's tables, which must agree",
    )
    group_protocol: str = Field(
        "classic",
        validation_alias="DPM_GROUP_PROTOCOL",
        pattern=r"^(classic|consumer)$",
        description="the projection workers' consumer group protocol: classic, or consumer (KIP-848; Kafka 4.x)",
    )
    write_linger_ms: float = Field(
        2.0,
        ge=0,
        le=1_000,
        validation_alias="DPM_WRITE_LINGER_MS",
        description="group commit: how long a partition's sequencer waits for more appends to share a transaction",
    )
    write_max_records: int = Field(
        1_000,
        ge=1,
        validation_alias="DPM_WRITE_MAX_RECORDS",
        description="group commit: most events one transaction of a partition's sequencer holds",
    )

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, env: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
        env = dict(env)
        path = env.get("DPM_KAFKA_CONFIG")
        properties = read_properties(Path(path)) if path else {}
        named = properties.get("bootstrap.servers")
        if named and env.get("DPM_BOOTSTRAP") and env["DPM_BOOTSTRAP"] != named:
            raise SettingsError(f"DPM_BOOTSTRAP ({env['DPM_BOOTSTRAP']}) and bootstrap.servers in {path} ({named}) "
                                "name different clusters: set one of them")  # fmt: skip
        if named:
            env["DPM_BOOTSTRAP"] = named  # a role's properties file (`dpm broker up --secure`) names its cluster
        env["properties"] = properties
        env["bootstrap_configured"] = bool(env.get("DPM_BOOTSTRAP"))
        return env

    def client_config(self) -> dict[str, str]:
        """Base librdkafka configuration shared by every producer, consumer and admin client."""
        return {"bootstrap.servers": self.bootstrap_servers, **_CLIENT_DEFAULTS, **self.property_values()}

    def property_values(self) -> dict[str, str]:
        """The client properties in clear, for the client libraries only (never log this)."""
        return {key: value.get_secret_value() for key, value in self.properties.items()}


# librdkafka spaces a client's first connections to the cluster's brokers by reconnect.backoff.ms / 2
# (50 ms at its default of 100): a fresh reader's first request waited that long about one time in
# five (measured on loopback), a fresh lookup's several clients each. At 20 the spacing is its floor,
# 11 ms; reconnects after a failure still back off exponentially up to reconnect.backoff.max.ms.
# DPM_KAFKA_CONFIG may set it otherwise.
_CLIENT_DEFAULTS = {"reconnect.backoff.ms": "20"}


class PathSettings(_Group):
    """Local state and caches."""

    home: Path = Field(
        default_factory=lambda: Path.home() / ".local" / "share" / "dpm",
        validation_alias="DPM_HOME",
        description="local state: broker data, baseline data dirs",
    )
    cache_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "dpm",
        validation_alias="DPM_CACHE_DIR",
        description="where the broker jars are cached",
    )
    java_home: Path | None = Field(
        None, validation_alias="JAVA_HOME", description="JDK that runs the local broker (unset: java on PATH)"
    )
    # About two seconds of reading: an index is built at about 55,000 offsets a second (docs/operations/capacity.md).
    index_progress_from: int = Field(
        100_000,
        ge=0,
        validation_alias="DPM_INDEX_PROGRESS_FROM",
        description="offsets a lookup index's catch-up reads from which a command says so and shows a progress bar",
    )


class ModelSettings(_Group):
    """Which model backend decides, and how to reach it."""

    backend: str = Field("extractive", validation_alias="DPM_BACKEND", description="model backend (see `dpm --help`)")
    model: str | None = Field(None, validation_alias="DPM_MODEL", description="model id (unset: the backend's default)")
    anthropic_api_key: SecretStr | None = Field(
        None, validation_alias="ANTHROPIC_API_KEY", description="API key of the anthropic backend"
    )
    anthropic_base_url: str | None = Field(
        None, validation_alias="ANTHROPIC_BASE_URL", description="Messages API base URL (a gateway or proxy)"
    )
    openai_base_url: str | None = Field(
        None, validation_alias="DPM_OPENAI_BASE_URL", description="OpenAI-compatible API base URL, e.g. .../v1"
    )
    openai_api_key: SecretStr | None = Field(
        None, validation_alias="DPM_OPENAI_API_KEY", description="API key of the openai backend (local servers: none)"
    )
    openai_seed: int = Field(
        0, validation_alias="DPM_OPENAI_SEED", description="sampling seed sent to servers that accept one"
    )
    price_table: Path | None = Field(
        None, validation_alias="DPM_PRICE_TABLE", description="JSON price table overriding list prices"
    )
    timeout_s: float = Field(60.0, gt=0, validation_alias="DPM_MODEL_TIMEOUT_S", description="model call timeout")
    context_tokens: int | None = Field(
        None,
        ge=1024,
        validation_alias="DPM_CONTEXT_TOKENS",
        description="the model's context window in tokens (unset: what the backend reports, else 8,192)",
    )
    segment_tokens: int = Field(
        16_000,
        ge=1024,
        validation_alias="DPM_SEGMENT_TOKENS",
        description="most tokens one segment's prompt takes when a case is longer than the window",
    )
    prompt_layout: PromptLayout = Field(
        PromptLayout.EVENTS_FIRST,
        validation_alias="DPM_PROMPT_LAYOUT",
        description="where DPM's projection prompts put the case's events: events-first (before the task: every "
        "projection of a case then begins with the same bytes, a prompt cache's prefix) or task-first "
        "(the first layout)",
    )
    max_retries: int = Field(
        2, ge=0, validation_alias="DPM_MODEL_MAX_RETRIES", description="model call retries (429, 529, 5xx, connection)"
    )

    concurrency: int = Field(
        8,
        ge=1,
        le=64,
        validation_alias="DPM_MODEL_CONCURRENCY",
        description="model calls one worker makes at once (triggers of a batch; Summ-only: cases)",
    )
    latency_ms: int = Field(
        0, ge=0, validation_alias="DPM_MODEL_LATENCY_MS", description="added wait per model call (tests, benchmarks)"
    )
    latency_jitter_ms: int = Field(
        0, ge=0, validation_alias="DPM_MODEL_LATENCY_JITTER_MS", description="extra wait drawn from each request"
    )

    def worst_call_s(self) -> float:
        """The longest one model call may take: every attempt timing out (backoff between them aside)."""
        return self.timeout_s * (self.max_retries + 1) + (self.latency_ms + self.latency_jitter_ms) / 1000


class WorkerSettings(_Group):
    """Consumer-group and transaction tuning of the projection workers."""

    session_timeout_ms: int = Field(
        10_000, gt=0, validation_alias="DPM_SESSION_TIMEOUT_MS", description="consumer group session timeout"
    )
    transaction_timeout_ms: int = Field(
        60_000, gt=0, validation_alias="DPM_TRANSACTION_TIMEOUT_MS", description="Kafka transaction timeout"
    )
    max_poll_interval_ms: int = Field(
        900_000,
        ge=10_000,
        validation_alias="DPM_MAX_POLL_INTERVAL_MS",
        description="longest a worker may spend on one batch before the group reassigns its partitions",
    )
    trigger_deadline_s: float = Field(
        30.0,
        gt=0,
        validation_alias="DPM_TRIGGER_DEADLINE_S",
        description="longest reading one trigger's case may take (then the trigger is dead-lettered: deadline)",
    )
    key_service_wait_s: float = Field(
        30.0,
        ge=0,
        validation_alias="DPM_KEY_SERVICE_WAIT_S",
        description="how long a trigger is retried while its tenant's key service (KMS) does not answer, then "
        "dead-lettered key-service-unavailable, which the same trigger id sent again recovers",
    )
    max_trigger_positions: int = Field(
        10_000,
        ge=1,
        le=100_000,
        validation_alias="DPM_MAX_TRIGGER_POSITIONS",
        description="most event positions one trigger may list (schema ceiling 100,000)",
    )
    health_stall_s: float = Field(
        60.0,
        gt=0,
        validation_alias="DPM_HEALTH_STALL_S",
        description="/healthz fails once the loop has not turned for this long (waiting on a model call counts)",
    )
    drain_s: float = Field(
        25.0,
        gt=0,
        validation_alias="DPM_DRAIN_S",
        description="after SIGTERM, how long a worker may take to finish its batch before it exits without it",
    )
    max_case_chars: int = Field(
        MAX_TRAJECTORY_CHARS,
        ge=1,
        validation_alias="DPM_MAX_CASE_CHARS",
        description="longest case (characters of event text) a worker decides; longer ones are dead-lettered oversize",
    )
    domains: tuple[str, ...] = Field(
        (),
        validation_alias="DPM_DOMAINS",
        description="domains accepted besides loan, claim, prior_auth and tax_exam (comma-separated; * for any)",
    )

    @field_validator("domains", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
        return _comma_list(value)

    def check_timing(self, model: ModelSettings) -> None:
        """Raises SettingsError unless one trigger's worst case fits in half the poll interval.

        A batch stops taking new triggers once half the interval is spent, so a trigger that
        starts then must finish within the other half: its read deadline plus two model calls
        (projection and decision), every attempt timing out.
        """
        worst = self.trigger_deadline_s + 2 * model.worst_call_s()
        allowed = self.batch_time_s()
        if worst > allowed:
            raise SettingsError(
                f"DPM_TRIGGER_DEADLINE_S ({self.trigger_deadline_s:g}) + 2 model calls x DPM_MODEL_TIMEOUT_S "
                f"({model.timeout_s:g}) x (DPM_MODEL_MAX_RETRIES ({model.max_retries}) + 1) = {worst:g} s must fit "
                f"in half of DPM_MAX_POLL_INTERVAL_MS ({self.max_poll_interval_ms}): {allowed:g} s"
            )

    def batch_time_s(self) -> float:
        """After this long a batch takes no more triggers (the rest is consumed again)."""
        return self.max_poll_interval_ms / 2000


WORKER_METRICS_PORT = 9400
BASELINE_METRICS_PORT = 9401


class MetricsSettings(_Group):
    """The /metrics endpoint of the long-running processes."""

    port: int | None = Field(
        None,
        ge=-1,
        validation_alias="DPM_METRICS_PORT",
        description=f"port of /metrics (-1: off; unset: {WORKER_METRICS_PORT} for dpm worker, "
        f"{BASELINE_METRICS_PORT} for dpm baseline, so both run on one host)",
    )
    addr: str = Field(
        "127.0.0.1", validation_alias="DPM_METRICS_ADDR", description="address /metrics binds to (containers: 0.0.0.0)"
    )
    tenants: tuple[str, ...] = Field(
        (),
        validation_alias="DPM_METRICS_TENANTS",
        description="tenants that get their own metric label (others: other)",
    )

    @field_validator("tenants", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
        return _comma_list(value)

    def port_or(self, default: int) -> int:
        """The port set (DPM_METRICS_PORT or --metrics-port), else the process's own default."""
        return default if self.port is None else self.port


class UiSettings(_Group):
    """The auditor's web pages (`dpm ui`): where they listen, who may read them, how much they keep."""

    addr: str = Field("127.0.0.1", validation_alias="DPM_UI_ADDR", description="address `dpm ui` binds to")
    port: int = Field(8080, ge=1, le=65535, validation_alias="DPM_UI_PORT", description="port of `dpm ui`")
    tokens: dict[str, SecretStr] = Field(
        default_factory=dict,
        validation_alias="DPM_UI_TOKENS",
        description="`tenant=token,...`: each token reads its tenant's decisions only (16+ characters each)",
    )
    admin_token: SecretStr | None = Field(
        None, validation_alias="DPM_UI_ADMIN_TOKEN", description="a token that reads every tenant (16+ characters)"
    )
    refresh_s: float = Field(
        2.0,
        gt=0,
        validation_alias="DPM_UI_REFRESH_S",
        description="seconds between looks for tenants onboarded since (one look every 10 s at most)",
    )
    concurrency: int = Field(
        2,
        ge=1,
        le=32,
        validation_alias="DPM_UI_CONCURRENCY",
        description="decision pages read and rendered at once, each with a Kafka reader of its own (about "
        "the cores the UI may use; a replay's model calls run outside this bound)",
    )
    session_idle_s: float = Field(
        1800.0,
        gt=0,
        validation_alias="DPM_UI_SESSION_IDLE_S",
        description="a signed-in browser idle this long signs in again",
    )
    session_max_s: float = Field(
        43_200.0, gt=0, validation_alias="DPM_UI_SESSION_MAX_S", description="a sign-in lasts this long at most"
    )
    contest: Literal["admin", "all", "none"] = Field(
        "admin",
        validation_alias="DPM_UI_CONTEST",
        description="who may contest a decision from its page (decisive events, reasons, what-if; each one "
        "recorded): `admin` (the admin token), `all` (every principal, its own tenant's), `none`",
    )
    contests_per_minute: int = Field(
        10, ge=1, validation_alias="DPM_UI_CONTESTS_PER_MINUTE", description="contests one principal may ask per minute"
    )
    trusted_proxies: tuple[str, ...] = Field(
        ("127.0.0.1",),
        validation_alias="DPM_UI_TRUSTED_PROXIES",
        description="addresses (comma-separated, * for any) whose X-Forwarded-For/-Proto headers are believed: "
        "a TLS-terminating proxy there makes cookies Secure and names the real client",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
        return _comma_list(value)

    @field_validator("tokens", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic passes the raw input
        if not isinstance(value, str):
            return value
        pairs = [item.partition("=") for item in _comma_list(value)]
        if any(not tenant.strip() or not sep for tenant, sep, _ in pairs):
            raise ValueError("expected tenant=token pairs separated by commas")
        return {tenant.strip(): token.strip() for tenant, _, token in pairs}

    @model_validator(mode="after")
    def _strong_enough(self) -> UiSettings:
        named = {**{f"the token of {t}": s for t, s in self.tokens.items()},
                 **({"DPM_UI_ADMIN_TOKEN": self.admin_token} if self.admin_token else {})}  # fmt: skip
        for name, secret in named.items():
            weakness = token_weakness(secret.get_secret_value())
            if weakness:
                raise ValueError(f"{name} is too weak: {weakness} (a random one passes: openssl rand -hex 16)")
        if len({t.get_secret_value() for t in named.values()}) < len(named):
            raise ValueError("two UI principals share a token (DPM_UI_TOKENS, DPM_UI_ADMIN_TOKEN)")
        return self


_MIN_TOKEN_CHARS = 16
_MIN_DISTINCT_CHARS = 6


def token_weakness(token: str) -> str | None:
    """Why a UI token is too easy to guess, or None.

    Too easy: shorter than 16, fewer than 6 distinct characters, or one character making up more
    than half of it (`aaaaaaaaaaaaaaaa` has 16 characters and is guessed at once).
    """
    if len(token) < _MIN_TOKEN_CHARS:
        return f"it has {len(token)} characters, fewer than {_MIN_TOKEN_CHARS}"
    if len(set(token)) < _MIN_DISTINCT_CHARS:
        return f"it has {len(set(token))} distinct characters, fewer than {_MIN_DISTINCT_CHARS}"
    if max(token.count(c) for c in set(token)) * 2 > len(token):
        return "one character makes up more than half of it"
    return None


class ApiSettings(_Group):
    """The HTTP API for agents (`dpm api`): where it listens, whose keys it takes, how much one request may carry."""

    addr: str = Field("127.0.0.1", validation_alias="DPM_API_ADDR", description="address `dpm api` binds to")
    port: int = Field(8088, ge=1, le=65535, validation_alias="DPM_API_PORT", description="port of `dpm api`")
    keys_file: Path | None = Field(
        None,
        validation_alias="DPM_API_KEYS_FILE",
        description="the API keys (hashes only; `dpm api keys add`); default `$DPM_HOME/api-keys.json`",
    )
    max_body_bytes: int = Field(
        4_194_304,
        ge=1_024,
        validation_alias="DPM_API_MAX_BODY_BYTES",
        description="largest request body (413 beyond it)",
    )
    rate_per_s: float = Field(
        50.0,
        gt=0,
        validation_alias="DPM_API_RATE_PER_S",
        description="requests per second one key may make to one replica, with bursts of twice as many (429 beyond)",
    )
    broker_wait_s: float = Field(
        10.0,
        gt=0,
        le=60,
        validation_alias="DPM_API_BROKER_WAIT_S",
        description="how long a door (the HTTP API, the MCP tools) waits for the cluster to take a write, or to "
        "answer a tenant's first request, before it answers 503 with Retry-After (nothing written)",
    )
    door_group: bool = Field(
        True,
        validation_alias="DPM_DOOR_GROUP",
        description="the doors divide the events partitions through the consumer group `<prefix>-doors` and forward "
        "an append to the door that owns its case (docs/concepts/writes.md); off, every door sequences each case it "
        "is asked for, handing partitions over between doors",
    )
    door_url: str | None = Field(
        None,
        validation_alias="DPM_DOOR_URL",
        description="the base URL other doors forward appends to this one at (e.g. http://10.0.0.7:8088); default "
        "http://<bind address>:<port>, with the host's address when bound to every interface (0.0.0.0)",
    )
    door_session_timeout_ms: int = Field(
        10_000,
        ge=3_000,
        le=300_000,
        validation_alias="DPM_DOOR_SESSION_TIMEOUT_MS",
        description="how long a door that stopped answering keeps its partitions in the doors' group (a door that "
        "stops cleanly gives them up at once)",
    )
    max_wait_s: float = Field(
        60.0,
        gt=0,
        validation_alias="DPM_API_MAX_WAIT_S",
        description="longest wait_s every door takes (the HTTP API, the MCP tools); a longer one is refused (400), "
        "a decision not in within wait_s answers 202 with its URL (a tool: its id, pending)",
    )


class TracingSettings(_Group):
    """OpenTelemetry spans of the projection worker (trace context is passed on to outputs either way)."""

    mode: str = Field(
        "off",
        validation_alias="DPM_TRACING",
        pattern=r"^(off|console|otlp)$",
        description="off (default: no spans, the trigger's traceparent passed on as is), console or otlp",
    )
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318/v1/traces",
        validation_alias="DPM_OTLP_ENDPOINT",
        description="where `otlp` tracing sends spans (OTLP over HTTP)",
    )


class KeySettings(_Group):
    """Envelope encryption of case content and how soon erased records are physically gone."""

    encryption: bool = Field(
        True, validation_alias="DPM_ENCRYPTION", description="seal case content under per-case data keys (on/off)"
    )
    keys_dir: Path | None = Field(
        None,
        validation_alias="DPM_KEYS_DIR",
        description="the local key provider's root: each pipeline's tenant KEKs in <root>/<topic prefix> "
        "(unset: $DPM_HOME/keys)",
    )
    kek_provider: str = Field(
        "local",
        validation_alias="DPM_KEK_PROVIDER",
        description="where tenants' key-encryption keys live, as a provider URI: `local` (files under the keys "
        "root), `aws-kms:?region=R&alias_prefix=P[&endpoint=URL]`, "
        "`kmip://HOST:PORT?cert=C&key=K&ca=A[&name_prefix=P]`, `vault-transit:?url=U[&mount=M&key_prefix=P]`; every "
        "tenant's unless DPM_KEK_PROVIDERS names it",
    )
    kek_providers_file: Path | None = Field(
        None,
        validation_alias="DPM_KEK_PROVIDERS",
        description="a JSON file mapping tenant ids to provider URIs, for tenants whose KEKs live elsewhere than "
        "DPM_KEK_PROVIDER says (read at start)",
    )
    key_binding: Literal["tenant", "case"] = Field(
        "tenant",
        validation_alias="DPM_KEY_BINDING",
        description="what the local provider binds a new wrapped key to: `tenant` (what the previous release "
        "opens: the default for this release's rolling upgrades) or `case` (a wrapped key opens for its own case "
        "only; set it once every member runs this release)",
    )
    key_cache_size: int = Field(
        10_000,
        ge=1,
        validation_alias="DPM_KEY_CACHE_SIZE",
        description="unwrapped data keys a process keeps in memory (least recently used go first)",
    )
    key_cache_ttl_s: float = Field(
        300.0,
        gt=0,
        validation_alias="DPM_KEY_CACHE_TTL_S",
        description="seconds an unwrapped data key is kept before it is unwrapped again (a KEK revoked at its "
        "service stops serving within it)",
    )
    erasure_lag_ms: int = Field(
        3_600_000,
        ge=1_000,
        validation_alias="DPM_ERASURE_LAG_MS",
        description="events and key topics: segment.ms and max.compaction.lag.ms (bound on physical removal)",
    )
    tombstone_retention_ms: int = Field(
        3_600_000,
        ge=0,
        validation_alias="DPM_TOMBSTONE_RETENTION_MS",
        description="events and key topics: delete.retention.ms (how long tombstones stay after compaction)",
    )


class Settings(BaseModel):
    """All settings of a process, read once by `from_env`."""

    model_config = ConfigDict(frozen=True)

    kafka: KafkaSettings = Field(default_factory=lambda: KafkaSettings.model_validate({}))
    paths: PathSettings = Field(default_factory=lambda: PathSettings.model_validate({}))
    model: ModelSettings = Field(default_factory=lambda: ModelSettings.model_validate({}))
    worker: WorkerSettings = Field(default_factory=lambda: WorkerSettings.model_validate({}))
    metrics: MetricsSettings = Field(default_factory=lambda: MetricsSettings.model_validate({}))
    keys: KeySettings = Field(default_factory=lambda: KeySettings.model_validate({}))
    ui: UiSettings = Field(default_factory=lambda: UiSettings.model_validate({}))
    api: ApiSettings = Field(default_factory=lambda: ApiSettings.model_validate({}))
    tracing: TracingSettings = Field(default_factory=lambda: TracingSettings.model_validate({}))

    def keys_root(self) -> Path:
        """DPM_KEYS_DIR, else `$DPM_HOME/keys`: the folder every pipeline's KEK folder lives in."""
        return self.keys.keys_dir or self.paths.home / "keys"

    def index_dir(self) -> Path:
        """`$DPM_HOME/index`: the lookup index files of this host (outputs and key places), shared by its processes."""
        return self.paths.home / "index"

    def keys_dir(self, prefix: str | None = None) -> Path:
        """The tenant KEKs of the pipeline with this topic prefix (default: the settings' own)."""
        return keys_folder(self.keys_root(), prefix or self.kafka.topic_prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Reads every group from `env` (default: the process environment); empty variables count as unset."""
        source = {k: v for k, v in (os.environ if env is None else env).items() if v != ""}
        try:
            return cls.model_validate({name: group.model_validate(source) for name, group in GROUPS.items()})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            # A whole group's input, or a secret's, is never echoed: it may hold credentials.
            shown = f" (got {first.get('input')!r})" if where and where not in _SECRET_VARIABLES else ""
            raise SettingsError(f"{where or 'settings'}: {first['msg']}{shown}") from exc

    def with_bootstrap(self, bootstrap: str) -> Settings:
        """These settings pointed at another cluster (the local broker recorded under DPM_HOME)."""
        return self.model_copy(update={"kafka": self.kafka.model_copy(update={"bootstrap_servers": bootstrap})})

    def with_choices(
        self, *, backend: str | None = None, metrics_port: int | None = None, kafka_version: str | None = None
    ) -> Settings:
        """These settings with a command line's choices applied (None keeps the setting)."""
        model = self.model if backend is None else self.model.model_copy(update={"backend": backend})
        metrics = self.metrics if metrics_port is None else self.metrics.model_copy(update={"port": metrics_port})
        kafka = self.kafka
        if kafka_version is not None:
            if not re.fullmatch(_KAFKA_RELEASE, kafka_version):
                raise SettingsError(f"Kafka version {kafka_version!r}: expected a 3.x or 4.x release such as 4.4.0")
            kafka = kafka.model_copy(update={"version": kafka_version})
        return self.model_copy(update={"model": model, "metrics": metrics, "kafka": kafka})


GROUPS: dict[str, type[_Group]] = {
    "kafka": KafkaSettings,
    "paths": PathSettings,
    "model": ModelSettings,
    "worker": WorkerSettings,
    "metrics": MetricsSettings,
    "keys": KeySettings,
    "ui": UiSettings,
    "api": ApiSettings,
    "tracing": TracingSettings,
}


_SECRET_VARIABLES = frozenset(
    str(field.validation_alias)
    for group in GROUPS.values()
    for field in group.model_fields.values()
    if isinstance(field.validation_alias, str) and "SecretStr" in str(field.annotation)
)


def _environment() -> dict[str, str]:
    documented: dict[str, str] = {}
    for group in GROUPS.values():
        for field in group.model_fields.values():
            if isinstance(field.validation_alias, str):
                documented[field.validation_alias] = field.description or ""
    return documented


# Every environment variable the processes read, with what it sets. Deployment files may only use
# these (a test checks the manifests and the compose file against this table).
ENVIRONMENT: dict[str, str] = _environment()
