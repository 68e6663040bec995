"""The Vault transit provider against recorded protocol exchanges: no Vault or OpenBao server can be installed here.

Each test lists the requests the provider must make, in order and with their bodies, and answers
them as Vault's transit API does (status codes and bodies in the shapes of Vault's API documentation,
/v1/transit/...). What a real server adds (policies, auditing, replication) is not shown by these.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from responses import matchers
from responses.registries import OrderedRegistry

from pipeline.core.events import CaseRef
from pipeline.keys.provider_uri import ProviderUriError, provider_from_uri
from pipeline.keys.providers import KeyDestroyedError, KeyServiceUnavailableError, WrappedKey, wrapping_context
from pipeline.keys.vault_transit import VaultTransitProvider

VAULT = "http://vault.test:8200"
CASE = CaseRef("bank-a", "c-1")
SECRET = b"k" * 32
KEY = f"dpm-acme-{hashlib.sha256(b'bank-a').hexdigest()[:32]}"
CIPHERTEXT = "vault:v1:8SDd3WHDOjf7mq69CyCqYjBXAiQQAVZRkFM13ok481zoCmHnSeDX9vyf7w=="


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _key_info(latest: int, min_decryption: int = 1, min_available: int = 0) -> dict[str, Any]:
    """A read of a transit key, as `GET /v1/transit/keys/:name` answers it."""
    keys = {str(n): 1700000000 + n for n in range(max(min_available, 1), latest + 1)}
    return {"data": {"name": KEY, "type": "aes256-gcm96", "keys": keys, "latest_version": latest,
                     "min_decryption_version": min_decryption, "min_encryption_version": 0,
                     "min_available_version": min_available, "deletion_allowed": False, "derived": False,
                     "exportable": False, "supports_encryption": True, "supports_decryption": True}}  # fmt: skip


@pytest.fixture
def vault(monkeypatch: pytest.MonkeyPatch) -> Iterator[responses.RequestsMock]:
    monkeypatch.setenv("VAULT_TOKEN", "s.test-token")
    with responses.RequestsMock(registry=OrderedRegistry, assert_all_requests_are_fired=True) as recorded:
        yield recorded


def _provider() -> VaultTransitProvider:
    provider = provider_from_uri(f"vault-transit:?url={VAULT}", local_root=Path("/nonexistent"),
                                 pipeline_prefix="acme")  # fmt: skip
    assert isinstance(provider, VaultTransitProvider)
    return provider


def _expect(vault: responses.RequestsMock, method: str, path: str, status: int, answer: dict[str, Any] | None = None,
            sent: dict[str, Any] | None = None) -> None:  # fmt: skip
    match = [matchers.header_matcher({"X-Vault-Token": "s.test-token"})]
    if sent is not None:
        match.append(matchers.json_params_matcher(sent, strict_match=False))
    vault.add(method, f"{VAULT}/v1/transit/{path}", status=status, json=answer, match=match)


def test_a_new_tenants_key_is_created_and_a_data_key_wrapped_with_its_case_as_associated_data(
    vault: responses.RequestsMock,
) -> None:
    context = _b64(wrapping_context(CASE))
    _expect(vault, "GET", f"keys/{KEY}", 404, {"errors": []})
    _expect(vault, "POST", f"keys/{KEY}", 204, sent={"type": "aes256-gcm96"})
    _expect(vault, "POST", f"encrypt/{KEY}", 200, {"data": {"ciphertext": CIPHERTEXT, "key_version": 1}},
            sent={"plaintext": _b64(SECRET), "associated_data": context})  # fmt: skip
    _expect(vault, "POST", f"decrypt/{KEY}", 200, {"data": {"plaintext": _b64(SECRET)}},
            sent={"ciphertext": CIPHERTEXT, "associated_data": context})  # fmt: skip
    _expect(
        vault,
        "POST",
        f"decrypt/{KEY}",
        400,
        {"errors": ["cipher: message authentication failed"]},
        sent={"ciphertext": CIPHERTEXT, "associated_data": _b64(wrapping_context(CaseRef("bank-a", "c-2")))},
    )
    provider = _provider()
    wrapped = provider.wrap(CASE, SECRET)
    assert wrapped == WrappedKey("v1", CIPHERTEXT.encode())
    assert provider.unwrap(CASE, wrapped) == SECRET
    with pytest.raises(KeyDestroyedError, match="does not open"):  # moved to another case: the tag fails
        provider.unwrap(CaseRef("bank-a", "c-2"), wrapped)


def test_rotation_is_transits_own_versions_and_retiring_raises_the_floor_and_trims(
    vault: responses.RequestsMock,
) -> None:
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(2))
    _expect(vault, "POST", f"keys/{KEY}/rotate", 200, _key_info(3))
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(3))
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(3))
    _expect(vault, "POST", f"keys/{KEY}/config", 204, sent={"min_decryption_version": 2, "min_encryption_version": 3})
    _expect(vault, "POST", f"keys/{KEY}/trim", 204, sent={"min_available_version": 2})
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(3, min_decryption=2, min_available=2))
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(3, min_decryption=2, min_available=2))
    _expect(vault, "POST", f"keys/{KEY}/config", 204, sent={"min_decryption_version": 3})
    _expect(vault, "POST", f"decrypt/{KEY}", 400, {"errors": ["ciphertext or signature version is disallowed by "
                                                              "policy (too old)"]})  # fmt: skip
    provider = _provider()
    assert provider.rotate("bank-a") == "v3"
    provider.retire("bank-a", "v1")  # below both floors, its material trimmed
    assert provider.versions("bank-a") == ["v2", "v3"]
    provider.retire("bank-a", "v2")  # the one before the current: under the decryption floor, trimmed next time
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(CASE, WrappedKey("v1", CIPHERTEXT.encode()))


def test_a_tenants_erasure_allows_deletion_then_deletes_the_key(vault: responses.RequestsMock) -> None:
    _expect(vault, "GET", f"keys/{KEY}", 200, _key_info(2))
    _expect(vault, "POST", f"keys/{KEY}/config", 204, sent={"deletion_allowed": True})
    _expect(vault, "DELETE", f"keys/{KEY}", 204)
    _expect(vault, "POST", f"decrypt/{KEY}", 400, {"errors": ["encryption key not found"]})
    provider = _provider()
    assert provider.destroy("bank-a") == 2
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(CASE, WrappedKey("v1", CIPHERTEXT.encode()))


def test_a_token_refused_or_vault_away_is_unavailable_never_an_erasure(vault: responses.RequestsMock) -> None:
    _expect(vault, "POST", f"decrypt/{KEY}", 403, {"errors": ["1 error occurred:\n\t* permission denied\n\n"]})
    _expect(vault, "POST", f"decrypt/{KEY}", 503, {"errors": ["Vault is sealed"]})
    provider = _provider()
    with pytest.raises(KeyServiceUnavailableError, match="check the token \\(VAULT_TOKEN\\)"):
        provider.unwrap(CASE, WrappedKey("v1", CIPHERTEXT.encode()))
    with pytest.raises(KeyServiceUnavailableError, match="Vault is sealed"):
        provider.unwrap(CASE, WrappedKey("v1", CIPHERTEXT.encode()))


def test_a_blob_that_is_no_transit_ciphertext_of_its_version_opens_nothing_and_asks_nothing(
    vault: responses.RequestsMock,
) -> None:
    provider = _provider()
    for wrapped in (WrappedKey("v2", CIPHERTEXT.encode()), WrappedKey("v1", b"\x00" * 60)):
        with pytest.raises(KeyDestroyedError):
            provider.unwrap(CASE, wrapped)


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("vault-transit:", "needs Vault's address"),
        ("vault-transit:?url=vault:8200", "needs Vault's address"),
        (f"vault-transit:?url={VAULT}&key_prefix=a/b", "key_prefix may hold"),
        (f"vault-transit:?url={VAULT}&token=s.x", "takes no option token"),
    ],
)
def test_a_vault_uri_is_refused_saying_what_to_write(uri: str, said: str) -> None:
    with pytest.raises(ProviderUriError, match=said):
        provider_from_uri(uri, local_root=Path(), pipeline_prefix="acme")
