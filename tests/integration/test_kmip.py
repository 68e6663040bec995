"""The KMIP provider against PyKMIP's own server (a separate process), over TLS with client certificates made here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core.events import CaseRef
from pipeline.kafka.local.local_broker import free_cluster_port
from pipeline.keys.kmip_provider import KmipProvider, TlsFiles
from pipeline.keys.provider_uri import ProviderUriError, provider_from_uri
from pipeline.keys.providers import KeyDestroyedError, KeyRevokedError, KeyServiceUnavailableError
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys
from tests.key_provider_contract import rotation_rewraps_and_erasure_after_it_opens_nothing, sealed_here_opens_there
from tests.kmip_support import KmipEndpoint, kmip_server, revoke_current

pytestmark = [pytest.mark.integration, pytest.mark.any_broker]  # no broker: a KMIP server of its own
SECRET = b"k" * 32
CASE = CaseRef("bank-a", "c-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KmipEndpoint]:
    with kmip_server(tmp_path_factory.mktemp("kmip")) as endpoint:
        yield endpoint


def _provider(server: KmipEndpoint, prefix: str) -> KmipProvider:
    provider = provider_from_uri(server.uri(name_prefix=f"dpm/{prefix}"), local_root=Path("/nonexistent"),
                                 pipeline_prefix="unused")  # fmt: skip
    assert isinstance(provider, KmipProvider)
    return provider


def test_a_data_key_is_wrapped_by_the_server_and_opens_for_its_own_case_only(server: KmipEndpoint) -> None:
    provider = _provider(server, "bound")
    wrapped = provider.wrap(CASE, SECRET)
    assert wrapped.kek_id == "v1"
    assert SECRET not in wrapped.blob
    assert provider.unwrap(CASE, wrapped) == SECRET
    assert _provider(server, "bound").unwrap(CASE, wrapped) == SECRET  # another process: found by its name
    # The additional data names the case: moved to another case or tenant, it does not open. PyKMIP answers a tag
    # that fails as it answers its own faults, so the provider cannot call it destroyed (never an erasure).
    for elsewhere in (CaseRef("bank-a", "c-2"), CaseRef("bank-b", "c-1")):
        with pytest.raises(KeyServiceUnavailableError, match="failed unwrapping"):
            provider.unwrap(elsewhere, wrapped)


def test_rotation_makes_a_new_version_current_old_ones_unwrap_until_retired_and_destroy_shreds(
    server: KmipEndpoint,
) -> None:
    provider = _provider(server, "rotation")
    old = provider.wrap(CASE, SECRET)
    assert provider.rotate("bank-a") == "v2"
    new = provider.wrap(CASE, SECRET)
    assert new.kek_id == "v2"
    assert provider.unwrap(CASE, old) == SECRET
    provider.retire("bank-a", "v1")
    provider.retire("bank-a", "v1")  # a retirement run again does nothing more
    assert provider.versions("bank-a") == ["v2"]
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(CASE, old)
    assert provider.destroy("bank-a") == 1
    assert provider.versions("bank-a") == []
    with pytest.raises(KeyDestroyedError):
        _provider(server, "rotation").unwrap(CASE, new)


def test_a_revoked_key_refuses_its_tenant_only_and_is_not_an_erasure(server: KmipEndpoint) -> None:
    provider = _provider(server, "revoked")
    wrapped = provider.wrap(CASE, SECRET)
    other = provider.wrap(CaseRef("bank-b", "c-1"), SECRET)
    revoke_current(server, "dpm/revoked", "bank-a")  # the server's operator deactivates the tenant's key
    with pytest.raises(KeyRevokedError, match="not active"):
        provider.unwrap(CASE, wrapped)
    with pytest.raises(KeyRevokedError):
        provider.wrap(CaseRef("bank-a", "c-9"), SECRET)  # no new version is made behind the operator's back
    assert provider.unwrap(CaseRef("bank-b", "c-1"), other) == SECRET
    assert provider.versions("bank-a") == ["v1"]
    assert provider.destroy("bank-a") == 1  # a revoked tenant is erased all the same
    with pytest.raises(KeyDestroyedError):
        provider.unwrap(CASE, wrapped)


def test_a_server_away_or_a_certificate_it_refuses_is_unavailable_naming_the_provider(
    server: KmipEndpoint, tmp_path: Path
) -> None:
    away = KmipProvider(host="127.0.0.1", port=free_cluster_port(1), tls=TlsFiles(server.cert, server.key, server.ca),
                        name_prefix="dpm/away", timeout_s=1)  # fmt: skip
    with pytest.raises(KeyServiceUnavailableError, match=r"KMIP \(127\.0\.0\.1:\d+\) cannot be reached"):
        away.wrap(CASE, SECRET)
    with kmip_server(tmp_path / "other") as stranger:  # a client certificate of another CA
        foreign = TlsFiles(stranger.cert, stranger.key, server.ca)
        refused = KmipProvider(host="127.0.0.1", port=server.port, tls=foreign, name_prefix="dpm/x")
        with pytest.raises(KeyServiceUnavailableError, match=r"KMIP \(127\.0\.0\.1:\d+\)"):
            refused.wrap(CASE, SECRET)


def test_a_uri_without_its_tls_files_is_refused_saying_what_it_needs(server: KmipEndpoint) -> None:
    with pytest.raises(ProviderUriError, match="needs cert, key, ca"):
        provider_from_uri(f"kmip://127.0.0.1:{server.port}", local_root=Path(), pipeline_prefix="p")
    with pytest.raises(ProviderUriError, match="no such file: ca=/nonexistent"):
        provider_from_uri(server.uri(ca="/nonexistent"), local_root=Path(), pipeline_prefix="p")
    with pytest.raises(ProviderUriError, match="takes no option region"):
        provider_from_uri(server.uri(region="x"), local_root=Path(), pipeline_prefix="p")


def test_case_keys_seal_open_and_erase_through_the_server(server: KmipEndpoint) -> None:
    """The pipeline's key ring over KMIP: a case's key made by one process opens in another; erasure shreds it."""
    writer, topic, case = sealed_here_opens_there(lambda: _provider(server, "ring"))
    assert writer.erase_case(case)
    fresh = CaseKeys(KeyRing(_provider(server, "ring")), topic)
    fresh.sync()
    assert fresh.erased(case)


def test_a_rotation_rewraps_every_case_key_on_the_server_and_an_erasure_after_it_opens_nothing(
    server: KmipEndpoint,
) -> None:
    rotation_rewraps_and_erasure_after_it_opens_nothing(lambda: _provider(server, "rotate"))
