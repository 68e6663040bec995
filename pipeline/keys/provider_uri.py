"""Which key provider serves each tenant: provider URIs, chosen by the operator's settings, never by records.

`local` keeps KEKs in files under the keys root (the embedded default). `aws-kms:?region=R` keeps
them in AWS KMS (`alias_prefix=P`, default `dpm/<topic prefix>`; `endpoint=URL` for a VPC endpoint
or a test server; `timeout_s=S`). `kmip://HOST:PORT?cert=C&key=K&ca=A` keeps them on a KMIP server,
reached over mutual TLS with the client certificate C, its key K and the server's CA A (PEM files;
`name_prefix=P`, default `dpm/<topic prefix>`; `timeout_s=S`). `vault-transit:?url=U` keeps them in
Vault's transit engine at U (`mount=M`, default `transit`; `key_prefix=P`, default `dpm-<topic prefix>`;
`ca=FILE`; `timeout_s=S`; the token from VAULT_TOKEN). DPM_KEK_PROVIDER names every tenant's
provider; DPM_KEK_PROVIDERS, a JSON object of tenant ids to URIs, names the tenants served by another.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef, InvalidEventError
from pipeline.keys.providers import KeyProvider, LocalFileKeyProvider, WrappedKey

SCHEMES = ("local", "aws-kms", "kmip", "vault-transit")
_OPTIONS = {"local": set(), "aws-kms": {"region", "alias_prefix", "endpoint", "timeout_s"},
            "kmip": {"cert", "key", "ca", "name_prefix", "timeout_s"},
            "vault-transit": {"url", "mount", "key_prefix", "ca", "timeout_s"}}  # fmt: skip
_KEY_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,100}")  # a transit key name's
# What a KMS alias may hold: a topic prefix's dots become dashes in the default alias prefix.
_ALIAS_PREFIX = re.compile(r"[A-Za-z0-9:/_-]{1,200}")
_ALIAS_UNSAFE = re.compile(r"[^A-Za-z0-9:/_-]")


class ProviderUriError(DpmError):
    """A provider URI, or the file of them, that names no provider this release can make."""


def read_tenant_uris(path: Path) -> dict[str, str]:
    """The tenant -> provider URI map of a DPM_KEK_PROVIDERS file; ProviderUriError naming what is wrong."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProviderUriError(f"DPM_KEK_PROVIDERS: cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ProviderUriError(f"DPM_KEK_PROVIDERS: {path} is not JSON: {exc}") from exc
    if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()):
        raise ProviderUriError(f"DPM_KEK_PROVIDERS: {path} must hold one JSON object of tenant ids to provider URIs")
    for tenant in loaded:
        try:
            CaseRef(tenant, "check")
        except InvalidEventError as exc:
            raise ProviderUriError(f"DPM_KEK_PROVIDERS: {path}: {exc}") from exc
    return dict(loaded)


def provider_from_uri(uri: str, *, local_root: Path, pipeline_prefix: str, bind_case: bool = False) -> KeyProvider:
    """The provider a URI names; ProviderUriError for one this release cannot make (what to write instead)."""
    parts = urlsplit(uri)
    scheme = parts.scheme or parts.path  # `local` parses as a path
    query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    unknown = sorted(set(query) - _OPTIONS.get(scheme, set()))
    if scheme in _OPTIONS and unknown:  # a misspelt option would otherwise fall back to its default unseen
        known = ", ".join(sorted(_OPTIONS[scheme])) or "none"
        raise ProviderUriError(f"{uri!r}: {scheme} takes no option {', '.join(unknown)} (its options: {known})")
    if scheme == "local":
        return LocalFileKeyProvider(local_root, bind_case=bind_case)
    if scheme == "aws-kms":
        region = query.get("region")
        if not region:
            raise ProviderUriError(f"{uri!r}: an aws-kms provider needs its region (aws-kms:?region=eu-west-1)")
        try:
            from pipeline.keys.aws_kms import AwsKmsProvider  # noqa: PLC0415 - the aws extra, loaded when chosen
        except ImportError as exc:
            raise ProviderUriError(f"{uri!r}: the aws-kms provider needs the aws extra "
                                   f"(pip install 'dpm-pipeline[aws]'): {exc}") from exc  # fmt: skip
        alias_prefix = query.get("alias_prefix", f"dpm/{_ALIAS_UNSAFE.sub('-', pipeline_prefix)}")
        if not _ALIAS_PREFIX.fullmatch(alias_prefix):
            raise ProviderUriError(f"{uri!r}: alias_prefix may hold letters, digits and :/_- only (a KMS alias's)")
        return AwsKmsProvider(region=region, alias_prefix=alias_prefix,
                              endpoint=query.get("endpoint"),
                              timeout_s=_seconds(uri, query.get("timeout_s", "5")))  # fmt: skip
    if scheme == "kmip":
        return _kmip(uri, parts.hostname, parts.port, query, pipeline_prefix)
    if scheme == "vault-transit":
        return _vault(uri, query, pipeline_prefix)
    raise ProviderUriError(f"{uri!r} names no key provider: write one of {', '.join(SCHEMES)} "
                           f"(docs/concepts/erasure.md, key providers)")  # fmt: skip


def _kmip(uri: str, host: str | None, port: int | None, query: Mapping[str, str], pipeline_prefix: str) -> KeyProvider:
    """The KMIP provider a `kmip://HOST:PORT?cert=&key=&ca=` URI names; its TLS files must be readable now."""
    if not host:
        raise ProviderUriError(f"{uri!r}: a kmip provider needs the server's host (kmip://kms.example:5696?...)")
    missing = [name for name in ("cert", "key", "ca") if not query.get(name)]
    if missing:
        raise ProviderUriError(f"{uri!r}: a kmip provider needs {', '.join(missing)}: the client certificate, its "
                               "key and the server's CA, as PEM files (cert=...&key=...&ca=...)")  # fmt: skip
    files = {name: Path(query[name]) for name in ("cert", "key", "ca")}
    unreadable = [f"{name}={path}" for name, path in files.items() if not path.is_file()]
    if unreadable:
        raise ProviderUriError(f"{uri!r}: no such file: {', '.join(unreadable)}")
    name_prefix = query.get("name_prefix", f"dpm/{_ALIAS_UNSAFE.sub('-', pipeline_prefix)}")
    if not _ALIAS_PREFIX.fullmatch(name_prefix):
        raise ProviderUriError(f"{uri!r}: name_prefix may hold letters, digits and :/_- only")
    try:
        from pipeline.keys.kmip_provider import KmipProvider, TlsFiles  # noqa: PLC0415 - the kmip extra, when chosen
    except ImportError as exc:
        raise ProviderUriError(f"{uri!r}: the kmip provider needs the kmip extra "
                               f"(pip install 'dpm-pipeline[kmip]'): {exc}") from exc  # fmt: skip
    return KmipProvider(host=host, port=port or 5696, tls=TlsFiles(files["cert"], files["key"], files["ca"]),
                        name_prefix=name_prefix, timeout_s=_seconds(uri, query.get("timeout_s", "5")))  # fmt: skip


def _vault(uri: str, query: Mapping[str, str], pipeline_prefix: str) -> KeyProvider:
    """The Vault transit provider a `vault-transit:?url=U` URI names."""
    url = query.get("url", "")
    if not url.startswith(("https://", "http://")):
        raise ProviderUriError(f"{uri!r}: a vault-transit provider needs Vault's address (url=https://vault:8200)")
    key_prefix = query.get("key_prefix", f"dpm-{re.sub(r'[^A-Za-z0-9_-]', '-', pipeline_prefix)}")
    if not _KEY_PREFIX.fullmatch(key_prefix):
        raise ProviderUriError(f"{uri!r}: key_prefix may hold letters, digits, _ and - only (a transit key's name)")
    try:
        from pipeline.keys.vault_transit import VaultTransitProvider  # noqa: PLC0415 - the vault extra, when chosen
    except ImportError as exc:
        raise ProviderUriError(f"{uri!r}: the vault-transit provider needs the vault extra "
                               f"(pip install 'dpm-pipeline[vault]'): {exc}") from exc  # fmt: skip
    return VaultTransitProvider(url=url, mount=query.get("mount", "transit"), key_prefix=key_prefix,
                                timeout_s=_seconds(uri, query.get("timeout_s", "5")), ca=query.get("ca"))  # fmt: skip


def _seconds(uri: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ProviderUriError(f"{uri!r}: timeout_s must be a number of seconds above 0")
    return seconds


class TenantProviders:
    """A KeyProvider that sends each tenant's calls to the provider the settings name for it.

    Every URI's provider is made at once (a URI that names nothing fails the process's start, not a
    tenant's first case; no provider connects before its first call), one per URI, shared by the
    tenants that name it.
    """

    name = "the tenants' key providers"

    def __init__(self, default_uri: str, tenant_uris: Mapping[str, str], make: Callable[[str], KeyProvider]) -> None:
        self._made = {uri: make(uri) for uri in dict.fromkeys([default_uri, *tenant_uris.values()])}
        self._default = self._made[default_uri]
        self._by_tenant = {tenant: self._made[uri] for tenant, uri in tenant_uris.items()}

    def of(self, tenant: str) -> KeyProvider:
        return self._by_tenant.get(tenant, self._default)

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        return self.of(case.tenant).wrap(case, secret)

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        return self.of(case.tenant).unwrap(case, wrapped)

    def rotate(self, tenant: str) -> str:
        return self.of(tenant).rotate(tenant)

    def versions(self, tenant: str) -> list[str]:
        return self.of(tenant).versions(tenant)

    def retire(self, tenant: str, kek_id: str) -> None:
        self.of(tenant).retire(tenant, kek_id)

    def destroy(self, tenant: str) -> int:
        return self.of(tenant).destroy(tenant)


def tenant_providers(default_uri: str, tenant_uris: Mapping[str, str], *, local_root: Path,
                     pipeline_prefix: str, bind_case: bool = False) -> KeyProvider:  # fmt: skip
    """The provider the settings name: the one provider itself when no tenant is served apart.

    `bind_case`: the local provider wraps new keys bound to their case (a KMS's context always is).
    """

    def make(uri: str) -> KeyProvider:
        return provider_from_uri(uri, local_root=local_root, pipeline_prefix=pipeline_prefix, bind_case=bind_case)

    return TenantProviders(default_uri, tenant_uris, make) if tenant_uris else make(default_uri)
