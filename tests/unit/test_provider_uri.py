"""Which key provider serves a tenant: URIs from the operator's settings, checked at start."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.config.settings import Settings, SettingsError
from pipeline.core.events import CaseRef
from pipeline.kafka.keytopic.keystore import key_provider
from pipeline.keys.provider_uri import ProviderUriError, TenantProviders, provider_from_uri, read_tenant_uris
from pipeline.keys.providers import KeyDestroyedError, KeyProvider, LocalFileKeyProvider


def _local(uri: str, root: Path) -> KeyProvider:
    return provider_from_uri(uri, local_root=root, pipeline_prefix="dpm")


def test_local_is_the_default_provider_and_keeps_its_files_under_the_pipelines_keys_folder(tmp_path: Path) -> None:
    settings = Settings.from_env({"DPM_HOME": str(tmp_path)})
    provider = key_provider(settings, "dpm")
    assert isinstance(provider, LocalFileKeyProvider)
    provider.wrap(CaseRef("acme", "c-1"), b"k" * 32)
    assert list((tmp_path / "keys" / "dpm").rglob("v1.key"))


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("vault://x", "names no key provider: write one of local, aws-kms, kmip"),
        ("kmip://?cert=a&key=b&ca=c", "needs the server's host"),
        ("kmip://kms.example:5696?cert=a", "needs key, ca: the client certificate"),
        ("kmip://kms.example:5696?cert=/nonexistent/c&key=/nonexistent/k&ca=/nonexistent/a", "no such file: cert="),
        ("kmip://kms.example?cert=a&key=b&ca=c&region=x", "kmip takes no option region"),
        ("aws-kms:", "needs its region"),
        ("aws-kms:?region=eu-west-1&timeout_s=0", "timeout_s must be a number of seconds above 0"),
        ("aws-kms:?region=eu-west-1&timeout_s=soon", "timeout_s must be a number of seconds above 0"),
        ("aws-kms:?region=eu-west-1&alias_prefix=dpm.prod", "alias_prefix may hold letters, digits and"),
        ("aws-kms:?region=eu-west-1&alias-prefix=x", "takes no option alias-prefix"),
        ("local:?root=/tmp", "local takes no option root"),
    ],
)
def test_a_uri_that_names_no_provider_is_refused_with_what_to_write(tmp_path: Path, uri: str, said: str) -> None:
    with pytest.raises(ProviderUriError, match=said):
        _local(uri, tmp_path)


def test_a_bad_provider_setting_stops_the_process_at_start_as_a_settings_error(tmp_path: Path) -> None:
    settings = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_KEK_PROVIDER": "hsm://rack-4"})
    with pytest.raises(SettingsError, match="names no key provider"):
        key_provider(settings, "dpm")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "is not JSON"),
        ('["acme"]', "one JSON object of tenant ids to provider URIs"),
        ('{"acme": 3}', "one JSON object of tenant ids to provider URIs"),
        ('{"a/b": "local"}', "tenant must be"),
    ],
)
def test_the_tenants_file_is_checked_whole(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "providers.json"
    path.write_text(content)
    with pytest.raises(ProviderUriError, match=said):
        read_tenant_uris(path)
    with pytest.raises(ProviderUriError, match="cannot read"):
        read_tenant_uris(tmp_path / "missing.json")


def test_each_tenant_is_served_by_the_provider_its_uri_names(tmp_path: Path) -> None:
    """Two URIs, two providers: a tenant named in the file is wrapped by its own, the rest by the default."""
    made: dict[str, LocalFileKeyProvider] = {}

    def make(uri: str) -> KeyProvider:
        made[uri] = LocalFileKeyProvider(tmp_path / uri)
        return made[uri]

    providers = TenantProviders("shared", {"bank-a": "own", "bank-b": "own"}, make)
    assert sorted(made) == ["own", "shared"]  # made at once, one per URI
    for tenant in ("bank-a", "bank-b", "bank-c"):
        case = CaseRef(tenant, "c-1")
        wrapped = providers.wrap(case, b"k" * 32)
        assert providers.unwrap(case, wrapped) == b"k" * 32
    assert made["own"].versions("bank-a") == ["v1"]
    assert made["own"].versions("bank-b") == ["v1"]
    assert made["shared"].versions("bank-c") == ["v1"]
    assert made["shared"].versions("bank-a") == []
    assert providers.rotate("bank-a") == "v2"
    assert providers.destroy("bank-a") == 2
    with pytest.raises(KeyDestroyedError):
        providers.unwrap(CaseRef("bank-a", "c-1"), made["own"].wrap(CaseRef("bank-b", "c-1"), b"k" * 32))


def test_the_settings_file_routes_a_tenant_to_its_provider(tmp_path: Path) -> None:
    path = tmp_path / "providers.json"
    path.write_bytes(orjson.dumps({"bank-a": "local"}))
    settings = Settings.from_env({"DPM_HOME": str(tmp_path), "DPM_KEK_PROVIDERS": str(path)})
    provider = key_provider(settings, "dpm")
    assert isinstance(provider, TenantProviders)
    assert isinstance(provider.of("bank-a"), LocalFileKeyProvider)


def test_a_topic_prefix_a_kms_alias_cannot_hold_is_made_safe_for_the_default_alias_prefix(tmp_path: Path) -> None:
    provider = provider_from_uri("aws-kms:?region=eu-west-1", local_root=tmp_path, pipeline_prefix="acme.prod")
    assert provider._prefix == "dpm/acme-prod"  # type: ignore[attr-defined]
