"""A KMIP server for the tests: PyKMIP's own, over TLS with client certificates, all made here."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kmip.core import enums
from kmip.core.factories.attributes import AttributeFactory
from kmip.services.kmip_client import KMIPProxy

from pipeline.kafka.local.local_broker import free_cluster_port

# PyKMIP's server, run as its own process (python -c): certificates, port and files as arguments.
_SERVER = """
import sys
from kmip.services.server import KmipServer
cert, key, ca, port, folder = sys.argv[1:6]
server = KmipServer(hostname="127.0.0.1", port=int(port), certificate_path=cert, key_path=key, ca_path=ca,
                    auth_suite="TLS1.2", config_path=None, log_path=folder + "/server.log", policy_path=folder,
                    enable_tls_client_auth=True, database_path=folder + "/kmip.db")
with server:
    server.serve()
"""


@dataclass(frozen=True)
class KmipEndpoint:
    """Where the test's KMIP server listens, and the files a client needs to reach it."""

    port: int
    ca: Path
    cert: Path
    key: Path

    def uri(self, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"ca": self.ca, "cert": self.cert, "key": self.key, **options}.items())
        return f"kmip://127.0.0.1:{self.port}?{query}"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(folder: Path, stem: str, common_name: str, ca_key: ec.EllipticCurvePrivateKey | None,
           usage: x509.ObjectIdentifier | None) -> ec.EllipticCurvePrivateKey:  # fmt: skip
    """A key and certificate (`<stem>.pem`, `<stem>.key`): the CA's own when `ca_key` is None, else signed by it."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(common_name))
               .issuer_name(_name("dpm test KMIP CA")).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1)))  # fmt: skip
    if usage is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    certificate = builder.sign(ca_key or key, hashes.SHA256())
    (folder / f"{stem}.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / f"{stem}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                                           serialization.NoEncryption()))  # fmt: skip
    return key


@contextlib.contextmanager
def kmip_server(folder: Path) -> Iterator[KmipEndpoint]:
    """PyKMIP's server on a free port, TLS with client certificates made by a CA of the test's own; stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _issue(folder, "ca", "dpm test KMIP CA", None, None)
    _issue(folder, "server", "127.0.0.1", ca_key, ExtendedKeyUsageOID.SERVER_AUTH)
    _issue(folder, "client", "dpm-worker", ca_key, ExtendedKeyUsageOID.CLIENT_AUTH)
    port = free_cluster_port(1)
    # A session of its own: the server forks a process per connection, and every one of them is stopped after.
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(folder / "server.pem"), str(folder / "server.key"),
                               str(folder / "ca.pem"), str(port), str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        _await_port(server, port)
        yield KmipEndpoint(port, folder / "ca.pem", folder / "client.pem", folder / "client.key")
    finally:
        _stop_group(server)


def _stop_group(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, then SIGKILL to what is left of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, sig)
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):  # the leader is gone: its children go with SIGKILL
            os.killpg(server.pid, signal.SIGKILL)
        return


def _await_port(server: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if server.poll() is not None or time.monotonic() > deadline:
            _stop_group(server)
            _, err = server.communicate()
            raise RuntimeError(f"PyKMIP's server did not start: {err.decode(errors='replace')[-2000:]}")
        time.sleep(0.2)


def revoke_current(endpoint: KmipEndpoint, name_prefix: str, tenant: str) -> None:
    """What the server's operator does to refuse a tenant: every version of its KEK revoked (deactivated, kept)."""
    group = f"{name_prefix}/{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"
    proxy = KMIPProxy(host="127.0.0.1", port=endpoint.port, certfile=str(endpoint.cert), keyfile=str(endpoint.key),
                      ca_certs=str(endpoint.ca), cert_reqs="CERT_REQUIRED", ssl_version="PROTOCOL_TLS",
                      config_file=os.devnull, kmip_version=enums.KMIPVersion.KMIP_1_4)  # fmt: skip
    proxy.open()
    try:
        located = proxy.locate(attributes=[AttributeFactory().create_attribute(enums.AttributeType.OBJECT_GROUP,
                                                                               group)])  # fmt: skip
        for uid in located.uuids:
            revoked = proxy.revoke(enums.RevocationReasonCode.CESSATION_OF_OPERATION, uid)
            assert revoked.result_status.value is enums.ResultStatus.SUCCESS, revoked.result_message
    finally:
        proxy.close()
