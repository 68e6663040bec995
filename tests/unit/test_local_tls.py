"""The secured local broker's certificates: a CA, and a node certificate it signed for loopback, in a keystore."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

from pipeline.kafka.local.local_tls import NODE_SUBJECT, ensure_node_tls


def test_the_node_certificate_is_signed_by_the_ca_for_loopback_and_kept_private(tmp_path: Path) -> None:
    tls = ensure_node_tls(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
    node = x509.load_pem_x509_certificate(tls.node_certificate.read_bytes())
    node.verify_directly_issued_by(ca)
    assert node.subject.rfc4514_string() == NODE_SUBJECT
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key, certificate, chain = pkcs12.load_key_and_certificates(tls.keystore.read_bytes(),
                                                               tls.keystore_password().encode())  # fmt: skip
    assert key is not None
    assert (certificate, chain) == (node, [ca])
    for private in (tls.keystore, tls.node_key, tls.ca_key, tls.keystore_password_file):
        assert private.stat().st_mode & 0o777 == 0o600, private
    assert tls.folder.stat().st_mode & 0o777 == 0o700


def test_certificates_are_made_once_and_reused(tmp_path: Path) -> None:
    first = ensure_node_tls(tmp_path / "tls")
    ca = first.ca.read_bytes()
    again = ensure_node_tls(tmp_path / "tls")
    assert again.ca.read_bytes() == ca
    assert again.keystore_password() == first.keystore_password()
