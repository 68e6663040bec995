"""Key-encryption keys in HashiCorp Vault's (or OpenBao's) transit engine, through hvac.

A tenant's KEK is one transit key, `<key_prefix>-<sha256(tenant)[:32]>` (type aes256-gcm96), and its
versions are the key's own: `v<N>` is transit's version N, as its ciphertexts (`vault:v<N>:...`)
say. A data key is wrapped by `transit/encrypt` with the case's context as `associated_data`, so it
opens for its own case only and never leaves Vault's answer unwrapped elsewhere. Rotation is
`transit/keys/<name>/rotate`; a version retired is put below `min_decryption_version` and trimmed
(its key material deleted); a tenant's erasure deletes the key (`deletion_allowed`, then DELETE).
The token is Vault's own convention (VAULT_TOKEN, or the token helper's file), never the URI's.
Transit has no disabled state of its own: a token whose policy no longer allows the key is refused
403, which is read as "cannot be asked now", naming the token and policy to check.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

import hvac
import requests
from hvac import exceptions

from pipeline.core.events import CaseRef
from pipeline.keys.providers import KeyDestroyedError, KeyServiceUnavailableError, WrappedKey, wrapping_context
from pipeline.wire.key import KEK_ID

_T = TypeVar("_T")
_CIPHERTEXT = re.compile(rb"vault:v(\d+):[A-Za-z0-9+/=]+")
# What transit answers (400) for a ciphertext that will not open: another case's, a version retired, a key gone.
_GONE = ("message authentication failed", "disallowed by policy", "encryption key not found", "invalid key version",
         "no existing key")  # fmt: skip


class _NoKeyError(KeyDestroyedError):
    """Transit has no key of that name (a read answered 404 without errors)."""


class VaultTransitProvider:
    """A tenant's KEK as a transit key; wrap and unwrap are transit's encrypt and decrypt with associated data."""

    def __init__(self, *, url: str, mount: str, key_prefix: str, timeout_s: float = 5.0,
                 ca: str | None = None) -> None:  # fmt: skip
        self.name = f"Vault transit ({url}, mount {mount})"
        self._mount, self._prefix = mount, key_prefix
        self._client = hvac.Client(url=url, timeout=timeout_s, verify=ca if ca else True)

    def _key(self, tenant: str) -> str:
        return f"{self._prefix}-{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        name, transit = self._key(case.tenant), self._client.secrets.transit
        if not self.versions(case.tenant):
            self._call(f"creating the key of tenant {case.tenant!r}",
                       lambda: transit.create_key(name, key_type="aes256-gcm96", mount_point=self._mount))  # fmt: skip
        try:
            answer = self._call(
                f"wrapping a data key of tenant {case.tenant!r}",
                lambda: transit.encrypt_data(
                    name, plaintext=_b64(secret), associated_data=_b64(wrapping_context(case)), mount_point=self._mount
                ),
            )
        except KeyDestroyedError as exc:  # deleted since it was read (the tenant erased meanwhile)
            raise KeyServiceUnavailableError(f"{self.name}: tenant {case.tenant!r} has no key to wrap with now"
                                             ) from exc  # fmt: skip
        ciphertext = str(answer["data"]["ciphertext"]).encode()
        found = _CIPHERTEXT.fullmatch(ciphertext)
        if found is None:
            raise KeyServiceUnavailableError(f"{self.name} answered encrypt with no transit ciphertext")
        return WrappedKey(f"v{int(found.group(1))}", ciphertext)

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        found = _CIPHERTEXT.fullmatch(wrapped.blob)
        if not KEK_ID.fullmatch(wrapped.kek_id) or found is None or f"v{int(found.group(1))}" != wrapped.kek_id:
            raise KeyDestroyedError(f"data key of case {case.key} is not a transit ciphertext of {wrapped.kek_id[:40]}")
        transit = self._client.secrets.transit
        answer = self._call(f"unwrapping a data key of case {case.key}", lambda: transit.decrypt_data(
            self._key(case.tenant), ciphertext=wrapped.blob.decode(), associated_data=_b64(wrapping_context(case)),
            mount_point=self._mount))  # fmt: skip
        return base64.b64decode(answer["data"]["plaintext"])

    def rotate(self, tenant: str) -> str:
        name, transit = self._key(tenant), self._client.secrets.transit
        if not self.versions(tenant):
            self._call(f"creating the key of tenant {tenant!r}",
                       lambda: transit.create_key(name, key_type="aes256-gcm96", mount_point=self._mount))  # fmt: skip
        else:
            self._call(
                f"rotating the key of tenant {tenant!r}", lambda: transit.rotate_key(name, mount_point=self._mount)
            )
        return self.versions(tenant)[-1]

    def versions(self, tenant: str) -> list[str]:
        key = self._read(tenant)
        if key is None:
            return []
        floor = max(int(key.get("min_decryption_version") or 1), int(key.get("min_available_version") or 0))
        return [f"v{n}" for n in sorted(int(v) for v in key.get("keys", {})) if n >= floor]

    def retire(self, tenant: str, kek_id: str) -> None:
        """Puts the version below the key's decryption floor and trims its material (versions go oldest first).

        Transit trims only below both floors, and its encryption floor must stay above the decryption
        one: a version just below the current one is put under the floor now and trimmed at the next
        retirement (the key ring's rotation keeps that version anyway).
        """
        key = self._read(tenant)
        if key is None or not KEK_ID.fullmatch(kek_id):
            return
        version, latest = int(kek_id[1:]), int(key["latest_version"])
        if version >= latest:
            raise ValueError(f"{kek_id} is tenant {tenant!r}'s current version: rotate before retiring it")
        floor = max(version + 1, int(key.get("min_decryption_version") or 1))
        name, transit, doing = (
            self._key(tenant),
            self._client.secrets.transit,
            f"retiring {kek_id} of tenant {tenant!r}",
        )
        if floor >= latest:
            self._call(doing, lambda: transit.update_key_configuration(name, min_decryption_version=floor,
                                                                       mount_point=self._mount))  # fmt: skip
            return
        self._call(
            doing,
            lambda: transit.update_key_configuration(
                name, min_decryption_version=floor, min_encryption_version=latest, mount_point=self._mount
            ),
        )
        self._call(doing, lambda: transit.trim_key(name, min_version=floor, mount_point=self._mount))

    def destroy(self, tenant: str) -> int:
        versions = self.versions(tenant)
        if not versions:
            return 0
        name, transit = self._key(tenant), self._client.secrets.transit
        doing = f"deleting the key of tenant {tenant!r}"
        self._call(doing, lambda: transit.update_key_configuration(name, deletion_allowed=True,
                                                                   mount_point=self._mount))  # fmt: skip
        self._call(doing, lambda: transit.delete_key(name, mount_point=self._mount))
        return len(versions)

    def _read(self, tenant: str) -> dict[str, Any] | None:
        """The tenant's key as transit describes it; None when it has none (404 without errors)."""
        name, transit = self._key(tenant), self._client.secrets.transit
        try:
            answer = self._call(f"reading the key of tenant {tenant!r}",
                                lambda: transit.read_key(name, mount_point=self._mount))  # fmt: skip
        except _NoKeyError:
            return None
        return dict(answer["data"])

    def _call(self, doing: str, request: Callable[[], _T]) -> _T:
        """One transit request; Vault's refusals as the provider's errors."""
        try:
            return request()
        except exceptions.InvalidPath as exc:  # 404: no such key (no errors), or no such route (the mount)
            if not exc.errors:
                raise _NoKeyError(f"{self.name}: {doing}: the key does not exist") from exc
            raise KeyServiceUnavailableError(f"{self.name} refused {doing} ({_first(exc)}): check the mount "
                                             "(the provider URI's mount=) and that the transit engine is enabled "
                                             "there") from exc  # fmt: skip
        except exceptions.InvalidRequest as exc:
            if any(words in str(exc) for words in _GONE):
                raise KeyDestroyedError(f"{self.name}: {doing}: it does not open ({_first(exc)})") from exc
            raise KeyServiceUnavailableError(f"{self.name} refused {doing}: {_first(exc)}") from exc
        except (exceptions.Forbidden, exceptions.Unauthorized) as exc:
            raise KeyServiceUnavailableError(f"{self.name} refused {doing} ({_first(exc)}): check the token "
                                             "(VAULT_TOKEN) and that its policy allows this key's transit paths"
                                             ) from exc  # fmt: skip
        except (exceptions.VaultError, requests.RequestException) as exc:
            raise KeyServiceUnavailableError(f"{self.name} could not answer {doing}: {_first(exc)}") from exc


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _first(exc: Exception) -> str:
    """An error's first line, without the request's URL (it names the key, derived from the tenant)."""
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)[:300]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
