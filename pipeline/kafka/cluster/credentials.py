"""The secured local broker's users: one SCRAM-SHA-512 user per role, and a client properties file for each.

`dpm broker up --secure` calls provision: it makes (once) a password per user, upserts the SCRAM
credential on the cluster through the nodes' own mutual-TLS listener (the only way in before any
user exists), and writes `<user>.properties` (mode 600, under `$DPM_HOME/credentials/`), which a
process names in DPM_KAFKA_CONFIG, and `<user>.java.properties`, the same user's settings for the
Java client (Kafka's console tools: `--producer.config`, `--consumer.config`, `--command-config`).
Passwords are in those files only: never on a command line, in a log or in an error.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from pipeline.config.settings import read_properties
from pipeline.kafka.cluster.acl_plan import Role
from pipeline.kafka.cluster.admin import admin_request
from pipeline.kafka.local.local_broker import ADMIN_USER, ClusterLayout

_ITERATIONS = 8192  # SCRAM-SHA-512 iterations (Kafka's minimum is 4096)
_TIMEOUT_S = 30.0
USERS = (ADMIN_USER, *(role.value for role in Role))


@dataclass(frozen=True)
class UserFile:
    user: str
    path: Path


def credentials_dir(home: Path) -> Path:
    """Where the users' properties files (with their passwords) live."""
    return home / "credentials"


def provision(layout: ClusterLayout, home: Path, users: tuple[str, ...] = USERS) -> list[UserFile]:
    """Makes each user's SCRAM credential on the running secured cluster and writes its properties file."""
    folder = credentials_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    passwords = {user: _password(folder, user) for user in users}
    mechanism = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, _ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, mechanism, password.encode()) for user, password in passwords.items()
    ]
    admin_request(layout.node_admin_config(),
                  lambda admin: admin.alter_user_scram_credentials(upserts, request_timeout=_TIMEOUT_S),
                  failed="could not create the cluster's users",
                  refused=lambda user: f"the credential of {user}")  # fmt: skip
    return [UserFile(user, _write_properties(folder, layout, user, password)) for user, password in passwords.items()]


def client_properties(layout: ClusterLayout, user: str, password: str) -> dict[str, str]:
    """Client properties (librdkafka) of `user` on the secured cluster's CLIENT listener."""
    return {
        "bootstrap.servers": layout.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(layout.tls.ca),
    }


def java_client_properties(layout: ClusterLayout, user: str, password: str) -> dict[str, str]:
    """The same user's properties for the Java client (its own key names, a JAAS line, a PEM truststore).

    Passwords are URL-safe base64 (secrets.token_urlsafe): nothing in them needs quoting in a JAAS line
    or escaping in a properties file.
    """
    return {
        "bootstrap.servers": layout.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
        f'password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(layout.tls.ca),
    }


def credential_files(folder: Path, user: str) -> tuple[Path, Path]:
    """The user's client properties files: librdkafka's (DPM_KAFKA_CONFIG) and the Java client's."""
    return folder / f"{user}.properties", folder / f"{user}.java.properties"


def _password(folder: Path, user: str) -> str:
    """The user's password: the one its properties file holds (a restarted cluster keeps its users), else a new one."""
    path, _ = credential_files(folder, user)
    kept = read_properties(path).get("sasl.password") if path.exists() else None
    return kept or secrets.token_urlsafe(24)


def _write_properties(folder: Path, layout: ClusterLayout, user: str, password: str) -> Path:
    path, java = credential_files(folder, user)
    _write_private(path, f"user {user!r} of the secured local broker (DPM_KAFKA_CONFIG={path})",
                   client_properties(layout, user, password))  # fmt: skip
    _write_private(java, f"user {user!r} of the secured local broker, for the Java client (Kafka's tools)",
                   java_client_properties(layout, user, password))  # fmt: skip
    return path


def _write_private(path: Path, about: str, properties: dict[str, str]) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text("\n".join([f"# dpm: {about}", *(f"{k}={v}" for k, v in properties.items())]) + "\n")
