"""Key-encryption keys per tenant behind one interface: where each tenant's KEKs live and how they wrap.

A provider never hands out a key-encryption key (KEK); it wraps and unwraps data keys under the
tenant's current KEK version, the way a cloud KMS (Encrypt/Decrypt with a key per tenant) or
Vault's transit engine (`transit/encrypt/<key>`, key versions, `min_decryption_version`) does.
Every wrapped key is bound to its tenant and case (the local provider's associated data, AWS's
encryption context): a wrapped key copied under another case's name does not open there.

Which provider serves a tenant is the operator's choice, by settings (provider_uri.py), never a
key record's: a record's `kek_id` is only ever a version, `v<N>`, since tenants' agents write
those records.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.wire.key import KEK_ID


class KeyDestroyedError(DpmError):
    """The tenant's key-encryption key (that version, or all of them) is destroyed: the data key is gone."""


class KeyServiceError(DpmError):
    """The key service did not answer as it should: the key may well exist. Never read as an erasure."""


class KeyServiceUnavailableError(KeyServiceError):
    """The key service is down, slow or refuses this process's credentials: asking again later may succeed."""


class KeyRevokedError(KeyServiceError):
    """The tenant's key-encryption key is disabled or revoked at the key service (nothing is destroyed).

    Its cases are refused until an operator enables it again.
    """


@dataclass(frozen=True)
class WrappedKey:
    """A data key encrypted under one KEK version."""

    kek_id: str
    blob: bytes


class KeyProvider(Protocol):
    """Wraps data keys under a tenant's KEK; the KEK itself never leaves the provider.

    Errors: KeyDestroyedError (that KEK version is gone: so is every key it wrapped),
    KeyRevokedError (disabled or revoked, not destroyed) and KeyServiceUnavailableError (the
    service cannot be asked now): only the first is an erasure.
    """

    name: str  # what the provider is, for messages ("AWS KMS (eu-west-1)")

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        """`secret`, the case's data key, encrypted under the tenant's current KEK version (created on first use)."""
        ...

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        """The case's data key; KeyDestroyedError when that KEK version is gone or the key is not the case's."""
        ...

    def rotate(self, tenant: str) -> str:
        """Makes a new KEK version current for the tenant; returns its id (old versions still unwrap)."""
        ...

    def versions(self, tenant: str) -> list[str]:
        """The tenant's KEK versions that exist, oldest first (the last is current)."""
        ...

    def retire(self, tenant: str, kek_id: str) -> None:
        """Destroys one KEK version (after every data key it wrapped was wrapped again)."""
        ...

    def destroy(self, tenant: str) -> int:
        """Destroys every KEK version of the tenant (crypto-shreds all its data); returns how many."""
        ...


def wrapping_context(case: CaseRef) -> bytes:
    """What binds a wrapped data key to its case: the associated data of a local wrap, a KMS's context."""
    return f"dpm-data-key:{case.key}".encode()


_VERSION = re.compile(r"^v(\d+)\.key$")


def shared_layout(root: Path) -> bool:
    """Whether `root` holds tenant folders directly: the layout in which every pipeline shared one KEK per tenant."""
    if not root.is_dir():
        return False
    return any(child.is_dir() and any(_VERSION.fullmatch(f.name) for f in child.iterdir()) for child in root.iterdir())


# A wrapped key bound to its case: this byte, the nonce, then the ciphertext and tag under the case's context.
# A key bound to its tenant alone (nonce, ciphertext and tag: 60 bytes for a 32-byte key) is what the previous
# release writes and reads; both open, and with DPM_KEY_BINDING=case a rotation wraps every key again bound to
# its case.
_CASE_BOUND = b"\x02"
_NONCE_BYTES, _KEY_BYTES, _TAG_BYTES = 12, 32, 16
_CASE_BOUND_BYTES = len(_CASE_BOUND) + _NONCE_BYTES + _KEY_BYTES + _TAG_BYTES


class LocalFileKeyProvider:
    """KEKs as 32-byte files, one folder per tenant (`<root>/<sha256(tenant)[:32]>/v<N>.key`, mode 0600).

    For development and tests: a deleted file is gone from this machine's view, but a file system
    gives no guarantee that its blocks are overwritten, and whoever reads the disk holds the keys.
    Production keys belong in a KMS or HSM (aws_kms.py, and the providers provider_uri.py names).
    """

    name = "the local key files"

    def __init__(self, root: Path, *, bind_case: bool = False) -> None:
        """`bind_case`: wrap new keys bound to their case (DPM_KEY_BINDING=case).

        Off by default for one release: a member of the previous release, running beside this one
        in a rolling upgrade, opens only keys bound to their tenant. Keys of both layouts always open.
        """
        self._root = root
        self._bind_case = bind_case

    def _folder(self, tenant: str) -> Path:
        return self._root / hashlib.sha256(tenant.encode()).hexdigest()[:32]

    def _versions(self, tenant: str) -> list[int]:
        folder = self._folder(tenant)
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _VERSION.fullmatch(p.name)))

    def _create(self, tenant: str, version: int) -> None:
        folder = self._folder(tenant)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:  # exclusive: two processes creating the same version keep the first one's key
            fd = os.open(folder / f"v{version}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        with os.fdopen(fd, "wb") as out:
            out.write(AESGCM.generate_key(bit_length=256))

    def _kek(self, tenant: str, kek_id: str) -> bytes:
        if not KEK_ID.fullmatch(kek_id):  # it names a file: never a path of the key record's writer's choosing
            raise KeyDestroyedError(f"{kek_id[:40]!r} is not a key-encryption key version of tenant {tenant!r}")
        try:
            return (self._folder(tenant) / f"{kek_id}.key").read_bytes()
        except FileNotFoundError as exc:
            raise KeyDestroyedError(f"key-encryption key {kek_id} of tenant {tenant!r} is destroyed") from exc

    def current(self, tenant: str) -> str:
        versions = self._versions(tenant)
        if not versions:
            self._create(tenant, 1)
            versions = self._versions(tenant)
        return f"v{versions[-1]}"

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        if len(secret) != _KEY_BYTES:  # the layouts are told apart by length
            raise ValueError(f"a data key is {_KEY_BYTES} bytes, not {len(secret)}")
        kek_id = self.current(case.tenant)
        nonce = os.urandom(_NONCE_BYTES)
        kek = AESGCM(self._kek(case.tenant, kek_id))
        if not self._bind_case:
            return WrappedKey(kek_id, nonce + kek.encrypt(nonce, secret, case.tenant.encode()))
        return WrappedKey(kek_id, _CASE_BOUND + nonce + kek.encrypt(nonce, secret, wrapping_context(case)))

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        kek = self._kek(case.tenant, wrapped.kek_id)
        blob = wrapped.blob
        if len(blob) == _CASE_BOUND_BYTES and blob[:1] == _CASE_BOUND:
            body, context = blob[1:], wrapping_context(case)
        else:  # wrapped before keys were bound to their case: nonce, key and tag, bound to the tenant
            body, context = blob, case.tenant.encode()
        try:
            return AESGCM(kek).decrypt(body[:_NONCE_BYTES], body[_NONCE_BYTES:], context)
        except InvalidTag as exc:
            raise KeyDestroyedError(f"data key does not unwrap under {wrapped.kek_id} of case {case.key}") from exc

    def rotate(self, tenant: str) -> str:
        versions = self._versions(tenant)
        self._create(tenant, (versions[-1] if versions else 0) + 1)
        return f"v{self._versions(tenant)[-1]}"

    def versions(self, tenant: str) -> list[str]:
        return [f"v{n}" for n in self._versions(tenant)]

    def retire(self, tenant: str, kek_id: str) -> None:
        (self._folder(tenant) / f"{kek_id}.key").unlink(missing_ok=True)

    def destroy(self, tenant: str) -> int:
        versions = self._versions(tenant)
        for version in versions:
            self.retire(tenant, f"v{version}")
        return len(versions)
