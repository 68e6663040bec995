"""Tenants' key-encryption keys in AWS KMS (the `aws` extra: boto3), one KMS key per tenant and version.

Each version `v<N>` of a tenant's KEK is a symmetric KMS key found by its alias,
`alias/<alias prefix>/<sha256(tenant)[:32]>/v<N>` (tagged `dpm:tenant` with the tenant id; the
alias carries a digest because tenant ids may hold characters an alias may not). A data key is
wrapped by KMS Encrypt with the encryption context `{"dpm:tenant", "dpm:case"}`: KMS refuses to
decrypt it under any other case's context, and CloudTrail logs each use with its case.

Erasure: a tenant's `destroy` disables every version at once (nothing unwraps from then on) and
schedules its deletion after the shortest window KMS allows (7 days); a case's erasure stays the
tombstone of its wrapped data key, as with every provider. Credentials come from boto3's own chain
(environment, profile, instance or pod role), never from a provider URI.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Any

import boto3.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from pipeline.core.events import CaseRef
from pipeline.keys.providers import KeyDestroyedError, KeyRevokedError, KeyServiceUnavailableError, WrappedKey

_VERSION = re.compile(r"/v([1-9][0-9]{0,8})$")
# KMS's shortest deletion window: a destroyed version is disabled at once, deleted after this.
PENDING_WINDOW_DAYS = 7
# How long a process wraps under the version it last found current before it lists the versions again.
CURRENT_TTL_S = 60.0
# What a caller's credentials cannot do, and what KMS answers while it cannot answer.
_REFUSED = frozenset({"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
                      "ExpiredTokenException", "IncompleteSignature", "InvalidClientTokenId"})  # fmt: skip
_DOWN = frozenset({"ThrottlingException", "KMSInternalException", "DependencyTimeoutException",
                   "KeyUnavailableException", "ServiceUnavailableException", "InternalFailure"})  # fmt: skip


class AwsKmsProvider:
    """Wraps data keys with KMS Encrypt / Decrypt under a per-tenant, per-version KMS key. Thread-safe."""

    def __init__(self, *, region: str, alias_prefix: str, endpoint: str | None = None,
                 timeout_s: float = 5.0) -> None:  # fmt: skip
        """A provider of the region's KMS (or of `endpoint`: a VPC endpoint, a test server).

        `alias_prefix`: where this pipeline's aliases live (`dpm/<topic prefix>` by default: pipelines
        never share a tenant's KEK).
        """
        self.name = f"AWS KMS ({region}{', ' + endpoint if endpoint else ''})"
        self._prefix = alias_prefix.strip("/")
        config = Config(connect_timeout=timeout_s, read_timeout=timeout_s,
                        retries={"max_attempts": 3, "mode": "standard"})  # fmt: skip
        # A session of its own: boto3's default one is shared by the process and not safe across threads.
        self._kms: Any = boto3.session.Session().client("kms", region_name=region, endpoint_url=endpoint,
                                                        config=config)  # fmt: skip
        # tenant -> (its current version, when this process learned it): asked again after CURRENT_TTL_S, so a
        # rotation made by another process is followed within it (the rotation keeps the version before).
        self._current: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _tenant_path(self, tenant: str) -> str:
        return f"alias/{self._prefix}/{hashlib.sha256(tenant.encode()).hexdigest()[:32]}/"

    def _alias(self, tenant: str, kek_id: str) -> str:
        return f"{self._tenant_path(tenant)}{kek_id}"

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        """Encrypts under the tenant's current version; a version retired meanwhile is forgotten and asked again."""
        for attempt in (1, 2):
            kek_id = self._current_version(case.tenant)
            try:
                answer = self._call("wrapping a data key", case.tenant, kek_id, self._kms.encrypt,
                                    KeyId=self._alias(case.tenant, kek_id), Plaintext=secret,
                                    EncryptionContext=_context(case))  # fmt: skip
            except (KeyDestroyedError, KeyRevokedError) as exc:
                self._forget_current(case.tenant)
                if attempt == 1:
                    continue  # retired or disabled since it was found current: asked again
                if isinstance(exc, KeyRevokedError):
                    raise  # the current version is disabled: the tenant is refused until it is enabled again
                # wrapping makes a key, it never reads one: a version gone is not an erasure
                raise KeyServiceUnavailableError(f"{self.name}: no version of tenant {case.tenant!r} takes new "
                                                 f"keys: {exc}") from exc  # fmt: skip
            return WrappedKey(kek_id, bytes(answer["CiphertextBlob"]))
        raise AssertionError("unreachable")

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        """Decrypts by the key the ciphertext names, held to its tenant and case by the encryption context.

        Not by alias: an alias just made may not be seen yet (KMS is eventually consistent), and a
        retired version's key answers "pending deletion", which is evidence of its destruction.
        """
        answer = self._call("unwrapping a data key", case.tenant, wrapped.kek_id, self._kms.decrypt,
                            CiphertextBlob=wrapped.blob, EncryptionContext=_context(case))  # fmt: skip
        return bytes(answer["Plaintext"])

    def rotate(self, tenant: str) -> str:
        versions = self._versions(tenant)
        kek_id = f"v{(versions[-1] if versions else 0) + 1}"
        self._create(tenant, kek_id)
        with self._lock:
            self._current[tenant] = (kek_id, time.monotonic())
        return kek_id

    def versions(self, tenant: str) -> list[str]:
        return [f"v{n}" for n in self._versions(tenant)]

    def retire(self, tenant: str, kek_id: str) -> None:
        """Disables the version's key, schedules its deletion and drops its alias; safe to run again part-way."""
        alias = self._alias(tenant, kek_id)
        try:
            metadata = self._call("retiring a key version", tenant, kek_id, self._kms.describe_key,
                                  KeyId=alias)["KeyMetadata"]  # fmt: skip
        except KeyDestroyedError:
            return  # its alias is gone: retired already
        key_id, state = metadata["KeyId"], metadata.get("KeyState", "")
        if state != "PendingDeletion":  # a retirement stopped after scheduling it: only the alias is left
            if state != "Disabled":
                self._call("disabling a key version", tenant, kek_id, self._kms.disable_key, KeyId=key_id)
            self._call("scheduling a key version's deletion", tenant, kek_id, self._kms.schedule_key_deletion,
                       KeyId=key_id, PendingWindowInDays=PENDING_WINDOW_DAYS)  # fmt: skip
        self._call("deleting a key version's alias", tenant, kek_id, self._kms.delete_alias, AliasName=alias)
        self._forget_current(tenant)

    def destroy(self, tenant: str) -> int:
        versions = self.versions(tenant)
        for kek_id in versions:
            self.retire(tenant, kek_id)
        return len(versions)

    # -- the tenant's versions -----------------------------------------------------------------------

    def _current_version(self, tenant: str) -> str:
        """The tenant's newest version (v1 made on first use), kept for CURRENT_TTL_S."""
        with self._lock:
            known = self._current.get(tenant)
        if known is not None and time.monotonic() - known[1] < CURRENT_TTL_S:
            return known[0]
        versions = self._versions(tenant)
        current = f"v{versions[-1]}" if versions else self._create(tenant, "v1")
        with self._lock:
            self._current[tenant] = (current, time.monotonic())
        return current

    def _forget_current(self, tenant: str) -> None:
        with self._lock:
            self._current.pop(tenant, None)

    def _versions(self, tenant: str) -> list[int]:
        path = self._tenant_path(tenant)
        found: list[int] = []
        try:
            for page in self._kms.get_paginator("list_aliases").paginate():
                for alias in page["Aliases"]:
                    name = alias["AliasName"]
                    match = _VERSION.search(name)
                    if name.startswith(path) and match is not None:
                        found.append(int(match.group(1)))
        except ClientError as exc:
            raise _service_error(exc, self.name, f"listing the key versions of tenant {tenant!r}") from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, self.name) from exc
        return sorted(found)

    def _create(self, tenant: str, kek_id: str) -> str:
        """A new KMS key under the version's alias; returns `kek_id`.

        A version another process made first is kept and ours dropped; a key whose alias cannot be
        made is scheduled for deletion, never left behind (each would be billed).
        """
        made = self._call("creating a key version", tenant, kek_id, self._kms.create_key,
                          Description=f"dpm key-encryption key {kek_id}", KeyUsage="ENCRYPT_DECRYPT",
                          KeySpec="SYMMETRIC_DEFAULT", Tags=[{"TagKey": "dpm:tenant", "TagValue": tenant}])  # fmt: skip
        key_id = made["KeyMetadata"]["KeyId"]
        try:
            self._kms.create_alias(AliasName=self._alias(tenant, kek_id), TargetKeyId=key_id)
        except (ClientError, BotoCoreError) as exc:
            self._call("dropping an unnamed key", tenant, kek_id, self._kms.schedule_key_deletion, KeyId=key_id,
                       PendingWindowInDays=PENDING_WINDOW_DAYS)  # fmt: skip
            if isinstance(exc, BotoCoreError):
                raise _unreachable(exc, self.name) from exc
            if _code(exc) != "AlreadyExistsException":
                raise _service_error(exc, self.name, f"naming {kek_id} of tenant {tenant!r}") from exc
        return kek_id

    def _call(self, doing: str, tenant: str, kek_id: str, call: Any, **arguments: Any) -> Any:  # noqa: ANN401
        """One KMS request, its errors said as the provider's: destroyed, revoked, or the service unavailable."""
        try:
            return call(**arguments)
        except ClientError as exc:
            code = _code(exc)
            if code in ("NotFoundException", "InvalidCiphertextException", "IncorrectKeyException"):
                raise KeyDestroyedError(f"{doing}: {kek_id} of tenant {tenant!r} is not in {self.name} "
                                        f"({code}: destroyed, or the key is not this case's)") from exc  # fmt: skip
            if code == "KMSInvalidStateException" and "pending deletion" in str(exc).lower():
                raise KeyDestroyedError(f"{doing}: {kek_id} of tenant {tenant!r} is pending deletion in "
                                        f"{self.name}: destroyed") from exc  # fmt: skip
            if code in ("DisabledException", "KMSInvalidStateException"):
                raise KeyRevokedError(f"{doing}: {kek_id} of tenant {tenant!r} is disabled in {self.name} ({code}): "
                                      f"enable the key again to serve the tenant's cases") from exc  # fmt: skip
            raise _service_error(exc, self.name, doing) from exc
        except BotoCoreError as exc:
            raise _unreachable(exc, self.name) from exc


def _context(case: CaseRef) -> dict[str, str]:
    return {"dpm:tenant": case.tenant, "dpm:case": case.case_id}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _service_error(exc: ClientError, provider: str, doing: str) -> KeyServiceUnavailableError:
    code = _code(exc)
    if code in _REFUSED:
        return KeyServiceUnavailableError(f"{provider} refused {doing} ({code}): check the credentials boto3 finds "
                                          f"(AWS_PROFILE, AWS_ACCESS_KEY_ID, the instance or pod role) and that "
                                          f"their policy allows what this process does: kms:Decrypt to read, "
                                          f"kms:Encrypt and kms:ListAliases to write, the operator's grants to "
                                          f"create, rotate or erase (docs/how-to/secured-cluster.md)")  # fmt: skip
    if code in _DOWN:
        return KeyServiceUnavailableError(f"{provider} could not answer {doing} now ({code}): asked again later")
    return KeyServiceUnavailableError(f"{provider} failed {doing}: {code or exc}")


def _unreachable(exc: BotoCoreError, provider: str) -> KeyServiceUnavailableError:
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return KeyServiceUnavailableError(f"{provider}: no AWS credentials found ({exc}): set AWS_PROFILE or "
                                          f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or give the process "
                                          f"a role")  # fmt: skip
    return KeyServiceUnavailableError(f"{provider} cannot be reached: {exc}")
