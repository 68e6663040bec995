"""The baseline's Kafka connection: the same client properties (DPM_KAFKA_CONFIG) as every other client.

faust speaks Kafka through aiokafka, not librdkafka, so the librdkafka properties are translated
here; security settings it cannot apply are an error, never silently dropped.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Any

import faust

from pipeline.config.settings import KafkaSettings, SettingsError
from pipeline.workers.baseline.transport import SCHEME

_LOG = logging.getLogger("pipeline.workers.baseline")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_TRANSLATED = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
})  # fmt: skip


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
    if "ssl.certificate.location" in props:
        context.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"),
                                props.get("ssl.key.password"))  # fmt: skip
    return context


def _credentials(props: Mapping[str, str]) -> faust.types.auth.CredentialsT | None:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return faust.SSLCredentials(_ssl_context(props))
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise SettingsError(f"DPM_KAFKA_CONFIG: security.protocol {protocol!r} is not supported by the baseline")
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN")).upper()
    if mechanism not in _SASL_MECHANISMS:
        raise SettingsError(f"DPM_KAFKA_CONFIG: sasl.mechanism {mechanism!r} is not supported by the baseline "
                            f"(supported: {', '.join(_SASL_MECHANISMS)})")  # fmt: skip
    return faust.SASLCredentials(
        username=props.get("sasl.username"),
        password=props.get("sasl.password"),
        mechanism=mechanism,
        ssl_context=_ssl_context(props) if protocol == "SASL_SSL" else None,
    )


def faust_connection(kafka: KafkaSettings) -> dict[str, Any]:
    """faust.App keyword arguments for the cluster and client properties the settings name.

    The brokers' scheme selects the transport that reads committed records only (transport.py).
    """
    props = kafka.property_values()
    bootstrap = props.get("bootstrap.servers", kafka.bootstrap_servers)
    options: dict[str, Any] = {"broker": [f"{SCHEME}://{b.strip()}" for b in bootstrap.split(",") if b.strip()]}
    if "client.id" in props:
        options["broker_client_id"] = props["client.id"]
    credentials = _credentials(props)
    if credentials is not None:
        options["broker_credentials"] = credentials
    ignored = sorted(set(props) - _TRANSLATED)
    if ignored:
        _LOG.warning("client properties not applied to the baseline (librdkafka tuning): %s", ", ".join(ignored))
    return options
