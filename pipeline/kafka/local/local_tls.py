"""Certificates for the secured local broker: a private CA and one node certificate, made with `cryptography`.

The node certificate serves both sides of the broker's own TLS: its listeners present it, and the
nodes present it to each other's internal and controller listeners (mutual TLS), where its subject
is the nodes' super-user principal. Clients only need the CA (`ca.pem`) to check the broker.
Everything is made once per cluster folder and reused by later starts; private keys are mode 600.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NODE_SUBJECT = "CN=dpm-node"  # the nodes' principal is User:CN=dpm-node (Kafka's default SSL principal builder)
_VALID_DAYS = 825  # the longest lifetime browsers and most TLS policies still accept for a leaf
_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)
_LOOPBACK_NAMES = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


@dataclass(frozen=True)
class NodeTls:
    """The files a secured cluster's nodes and clients use, and the node keystore's password."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA certificate (PEM): the truststore of nodes and clients alike."""
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def keystore(self) -> Path:
        """The node's key and certificate chain as PKCS#12, for the broker's JVM."""
        return self.folder / "node.p12"

    @property
    def node_certificate(self) -> Path:
        return self.folder / "node.pem"

    @property
    def node_key(self) -> Path:
        """The node's private key (PEM, unencrypted, mode 600): what the operator's bootstrap admin client shows."""
        return self.folder / "node.key"

    @property
    def keystore_password_file(self) -> Path:
        return self.folder / "keystore.password"

    def keystore_password(self) -> str:
        return self.keystore_password_file.read_text().strip()


def ensure_node_tls(folder: Path) -> NodeTls:
    """The cluster's CA and node certificate under `folder`, made on first use."""
    tls = NodeTls(folder)
    if tls.keystore.exists() and tls.ca.exists() and tls.node_key.exists():
        return tls
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dpm local CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    node_key = ec.generate_private_key(ec.SECP256R1())
    node_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE_SUBJECT.removeprefix("CN="))])
    node = (
        _builder(node_name, ca_name, node_key, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(list(_LOOPBACK_NAMES)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    password = secrets.token_urlsafe(24)
    _write_private(tls.keystore_password_file, password.encode())
    _write_private(tls.ca_key, ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))  # fmt: skip
    _write_private(tls.node_key, node_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))  # fmt: skip
    encryption = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .kdf_rounds(50_000)
        .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
        .hmac_hash(hashes.SHA256())
        .build(password.encode())
    )
    _write_private(tls.keystore, pkcs12.serialize_key_and_certificates(b"dpm-node", node_key, node, [ca], encryption))
    tls.node_certificate.write_bytes(node.public_bytes(serialization.Encoding.PEM))
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))  # written last: its presence means complete
    return tls


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
    )


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)
