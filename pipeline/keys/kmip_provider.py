"""Key-encryption keys on a KMIP server (an HSM or key manager speaking OASIS KMIP), through PyKMIP.

Each version of a tenant's KEK is an AES-256 symmetric key on the server, named
`<name_prefix>/<sha256(tenant)[:32]>/v<N>` in the object group
`<name_prefix>/<sha256(tenant)[:32]>`. A data key is wrapped by the server's Encrypt in AES-GCM with
the case's wrapping context as additional data (KMIP 1.4's authenticated encryption), so the KEK
never leaves the server and a wrapped key opens for its own case only. A wrapped key names the
object that wrapped it (its id's length and the id, then nonce, ciphertext and tag), and is
unwrapped by that object: only an object the server no longer has reads as destroyed, whatever the
version listing says. PyKMIP's client methods do not pass GCM's additional data or return its tag,
so Encrypt and Decrypt are sent as request payloads of their own through its proxy. The connection
is mutual TLS (the client's certificate and key, the server's CA); PyKMIP checks the server's
certificate against that CA but not its host name.

Erasure: a tenant's versions are revoked and destroyed on the server. What a destroyed object leaves
behind (PyKMIP deletes it; the KMIP specification keeps its metadata in the Destroyed state) is the
server's to say.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from kmip.core import enums
from kmip.core.attributes import CryptographicParameters
from kmip.core.factories.attributes import AttributeFactory
from kmip.core.messages import messages, payloads
from kmip.core.messages.contents import Operation
from kmip.core.objects import TemplateAttribute
from kmip.services.kmip_client import KMIPProxy

from pipeline.core.events import CaseRef
from pipeline.keys.providers import (
    KeyDestroyedError,
    KeyRevokedError,
    KeyServiceError,
    KeyServiceUnavailableError,
    WrappedKey,
    wrapping_context,
)
from pipeline.wire.key import KEK_ID

_NONCE_BYTES, _TAG_BYTES = 12, 16
# A process asks the server for a tenant's versions again after this long: another process's rotation is
# followed within it (as the AWS provider does).
VERSIONS_TTL_S = 60.0
_GCM = CryptographicParameters(
    block_cipher_mode=enums.BlockCipherMode.GCM,
    cryptographic_algorithm=enums.CryptographicAlgorithm.AES,
    tag_length=_TAG_BYTES,
)
_GONE_STATES = {enums.State.DESTROYED, enums.State.DESTROYED_COMPROMISED}
_T = TypeVar("_T")


@dataclass(frozen=True)
class TlsFiles:
    """The client's certificate and key, and the CA that signed the server's certificate (PEM files)."""

    cert: Path
    key: Path
    ca: Path


class _FailedError(Exception):
    """A KMIP operation the server answered with a failure: its reason and message."""

    def __init__(self, reason: enums.ResultReason | None, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class KmipProvider:
    """A tenant's KEK versions as AES keys on a KMIP server; wrap and unwrap are the server's Encrypt and Decrypt."""

    def __init__(self, *, host: str, port: int, tls: TlsFiles, name_prefix: str, timeout_s: float = 5.0) -> None:
        self.name = f"KMIP ({host}:{port})"
        self._host, self._port, self._tls, self._timeout_s = host, port, tls, timeout_s
        self._prefix = name_prefix
        self._lock = threading.Lock()  # one connection, one request at a time (PyKMIP's proxy is not thread-safe)
        self._proxy: KMIPProxy | None = None
        self._attributes = AttributeFactory()
        self._versions: dict[str, tuple[float, dict[int, list[str]]]] = {}  # tenant -> (read at, version -> ids)

    # The provider interface

    def wrap(self, case: CaseRef, secret: bytes) -> WrappedKey:
        """Encrypted by the tenant's current version; the blob names the object that holds it, then nonce, data, tag."""
        for fresh in (False, True):  # a version retired by another process since it was listed: listed again
            versions = self._known(case.tenant, fresh=fresh) or self._create(case.tenant, 1)
            current = max(versions)
            uid = versions[current][0]
            nonce = os.urandom(_NONCE_BYTES)
            request = payloads.EncryptRequestPayload(unique_identifier=uid, cryptographic_parameters=_GCM, data=secret,
                                                     iv_counter_nonce=nonce,
                                                     auth_additional_data=wrapping_context(case))  # fmt: skip
            try:
                answer = self._call(f"wrapping a data key of tenant {case.tenant!r}",
                                    partial(_send, operation=enums.Operation.ENCRYPT, payload=request))  # fmt: skip
            except KeyDestroyedError:
                continue
            named = uid.encode()
            return WrappedKey(f"v{current}", bytes([len(named)]) + named + nonce + answer.data + answer.auth_tag)
        raise KeyServiceUnavailableError(f"{self.name}: no version of tenant {case.tenant!r} takes new keys now")

    def unwrap(self, case: CaseRef, wrapped: WrappedKey) -> bytes:
        """Decrypted by the object the blob names: only that object gone (ITEM_NOT_FOUND) is an erasure.

        PyKMIP's server answers a tag that does not verify (a key moved to another case) with the
        general failure it gives any fault of its own, so that answer is read as "cannot be asked now",
        never as destroyed: a wrapped key moved elsewhere stays closed either way.
        """
        _version(case.tenant, wrapped.kek_id)
        blob = wrapped.blob
        named = blob[0] if blob else 0
        if not named or len(blob) <= 1 + named + _NONCE_BYTES + _TAG_BYTES:
            raise KeyDestroyedError(f"data key of case {case.key} is not a KMIP-wrapped key")
        uid = blob[1 : 1 + named].decode("ascii", "replace")
        rest = blob[1 + named :]
        nonce, body, tag = rest[:_NONCE_BYTES], rest[_NONCE_BYTES:-_TAG_BYTES], rest[-_TAG_BYTES:]
        request = payloads.DecryptRequestPayload(unique_identifier=uid, cryptographic_parameters=_GCM, data=body,
                                                 iv_counter_nonce=nonce, auth_tag=tag,
                                                 auth_additional_data=wrapping_context(case))  # fmt: skip
        answer = self._call(f"unwrapping a data key of case {case.key}",
                            partial(_send, operation=enums.Operation.DECRYPT, payload=request))  # fmt: skip
        return bytes(answer.data)

    def rotate(self, tenant: str) -> str:
        versions = self._known(tenant, fresh=True)
        return f"v{max(self._create(tenant, max(versions, default=0) + 1))}"

    def versions(self, tenant: str) -> list[str]:
        return [f"v{n}" for n in sorted(self._known(tenant, fresh=True))]

    def retire(self, tenant: str, kek_id: str) -> None:
        for uid in self._known(tenant, fresh=True).get(_version(tenant, kek_id), []):
            self._destroy(uid)
        self._versions.pop(tenant, None)

    def destroy(self, tenant: str) -> int:
        versions = self._known(tenant, fresh=True)
        for uid in [uid for ids in versions.values() for uid in ids]:
            self._destroy(uid)
        self._versions.pop(tenant, None)
        return len(versions)

    # The server's objects

    def _group(self, tenant: str) -> str:
        return f"{self._prefix}/{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"

    def _known(self, tenant: str, *, fresh: bool = False) -> dict[int, list[str]]:
        """The tenant's versions and the ids of the objects holding each (usually one), at most VERSIONS_TTL_S old."""
        cached = self._versions.get(tenant)
        if cached is not None and not fresh and time.monotonic() - cached[0] < VERSIONS_TTL_S:
            return cached[1]
        group = self._group(tenant)
        doing = f"listing the key versions of tenant {tenant!r}"
        in_group = [self._attributes.create_attribute(enums.AttributeType.OBJECT_GROUP, group)]
        uids: list[str] = self._call(doing, lambda proxy: _checked(proxy.locate(attributes=in_group)).uuids)
        versions: dict[int, list[str]] = {}
        for uid in uids:
            try:
                name, state = self._call(doing, partial(_name_and_state, uid=uid))
            except KeyDestroyedError:  # destroyed since it was located (another process's retirement)
                continue
            version = name.removeprefix(f"{group}/v") if name.startswith(f"{group}/v") else ""
            if version.isdigit() and state not in _GONE_STATES:
                versions.setdefault(int(version), []).append(uid)
        for ids in versions.values():
            ids.sort(key=lambda uid: (len(uid), uid))  # the same order in every process
        self._versions[tenant] = (time.monotonic(), versions)
        return versions

    def _create(self, tenant: str, version: int) -> dict[int, list[str]]:
        """Makes version `version` of the tenant's KEK, active; the tenant's versions as the server then lists them."""
        group, make = self._group(tenant), self._attributes.create_attribute
        template = TemplateAttribute(attributes=[
            make(enums.AttributeType.CRYPTOGRAPHIC_ALGORITHM, enums.CryptographicAlgorithm.AES),
            make(enums.AttributeType.CRYPTOGRAPHIC_LENGTH, 256),
            make(enums.AttributeType.CRYPTOGRAPHIC_USAGE_MASK,
                 [enums.CryptographicUsageMask.ENCRYPT, enums.CryptographicUsageMask.DECRYPT]),
            make(enums.AttributeType.NAME, f"{group}/v{version}"),
            make(enums.AttributeType.OBJECT_GROUP, group),
        ])  # fmt: skip
        doing = f"creating key version v{version} of tenant {tenant!r}"
        uid = self._call(doing, lambda proxy: _checked(proxy.create(enums.ObjectType.SYMMETRIC_KEY, template)).uuid)
        self._call(doing, lambda proxy: _checked(proxy.activate(uid)))
        return self._known(tenant, fresh=True)

    def _destroy(self, uid: str) -> None:
        """Revokes then destroys one object (KMIP destroys only what is not active); gone already is done."""
        doing = f"destroying key object {uid}"
        reason = enums.RevocationReasonCode.CESSATION_OF_OPERATION
        with contextlib.suppress(KeyDestroyedError, KeyServiceError):  # gone, or not active: destroyed all the same
            self._call(doing, lambda proxy: _checked(proxy.revoke(reason, uid)))
        with contextlib.suppress(KeyDestroyedError):
            self._call(doing, lambda proxy: _checked(proxy.destroy(uid)))

    # The connection

    def _call(self, doing: str, request: Callable[[KMIPProxy], _T]) -> _T:
        """One request on the connection (opened, or opened again after a failure); errors as the provider's."""
        with self._lock:
            try:
                return request(self._connected())
            except _FailedError as exc:
                raise self._refused(doing, exc) from exc
            except (OSError, EOFError) as exc:  # the server away or the TLS session broken: connect again next time
                self._disconnect()
                raise KeyServiceUnavailableError(f"{self.name} cannot be reached while {doing}: {exc or type(exc)}"
                                                 ) from exc  # fmt: skip
            except Exception as exc:
                self._disconnect()
                raise KeyServiceUnavailableError(f"{self.name} failed {doing}: {type(exc).__name__}: {exc}") from exc

    def _connected(self) -> KMIPProxy:
        if self._proxy is None:
            proxy = KMIPProxy(host=self._host, port=self._port, certfile=str(self._tls.cert),
                              keyfile=str(self._tls.key), ca_certs=str(self._tls.ca), cert_reqs="CERT_REQUIRED",
                              ssl_version="PROTOCOL_TLS", do_handshake_on_connect=True, suppress_ragged_eofs=True,
                              timeout=max(1, round(self._timeout_s)), config_file=os.devnull,
                              kmip_version=enums.KMIPVersion.KMIP_1_4)  # fmt: skip
            proxy.open()
            self._proxy = proxy
        return self._proxy

    def _disconnect(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            with contextlib.suppress(OSError):
                proxy.close()

    def _refused(self, doing: str, exc: _FailedError) -> Exception:
        """What a failed operation means for the data keys: destroyed, revoked, or the server not serving now.

        Only an object the server no longer has is destroyed; anything it cannot do now is not.
        """
        if exc.reason is enums.ResultReason.ITEM_NOT_FOUND:
            return KeyDestroyedError(f"{self.name}: {doing}: the key object is gone ({exc})")
        inactive = exc.reason is enums.ResultReason.WRONG_KEY_LIFECYCLE_STATE or (
            exc.reason is enums.ResultReason.PERMISSION_DENIED and "Active state" in str(exc)
        )  # PyKMIP's wording
        if inactive:
            return KeyRevokedError(f"{doing}: the key is not active in {self.name} (revoked or deactivated): an "
                                   f"operator of the KMIP server must activate a new version ({exc})")  # fmt: skip
        if exc.reason is enums.ResultReason.PERMISSION_DENIED:
            return KeyServiceUnavailableError(f"{self.name} refused {doing} ({exc}): check the client certificate "
                                              "(the provider URI's cert and key) and its rights there")  # fmt: skip
        return KeyServiceUnavailableError(f"{self.name} failed {doing}: {exc}")


def _send(proxy: KMIPProxy, operation: enums.Operation, payload: Any) -> Any:  # noqa: ANN401 - PyKMIP's payloads
    """One operation as a request of its own (PyKMIP's Encrypt and Decrypt leave out GCM's data and tag)."""
    item = messages.RequestBatchItem(operation=Operation(operation), request_payload=payload)
    answer = proxy._send_and_receive_message(proxy._build_request_message(None, [item])).batch_items[0]
    if answer.result_status.value is not enums.ResultStatus.SUCCESS:
        raise _FailedError(answer.result_reason.value if answer.result_reason else None,
                      str(answer.result_message.value if answer.result_message else "failed"))  # fmt: skip
    return answer.response_payload


def _checked(result: Any) -> Any:  # noqa: ANN401 - PyKMIP's results
    """A PyKMIP result, or _FailedError with its reason."""
    if result.result_status.value is not enums.ResultStatus.SUCCESS:
        reason = result.result_reason.value if result.result_reason else None
        raise _FailedError(reason, str(result.result_message.value if result.result_message else "failed"))
    return result


def _name_and_state(proxy: KMIPProxy, uid: str) -> tuple[str, enums.State | None]:
    found = _checked(proxy.get_attributes(uid, ["Name", "State"]))
    name, state = "", None
    for attribute in found.attributes:
        value = attribute.attribute_value
        if attribute.attribute_name.value == "Name":
            name = str(value.name_value.value)
        elif attribute.attribute_name.value == "State":
            state = value.value
    return name, state


def _version(tenant: str, kek_id: str) -> int:
    if not KEK_ID.fullmatch(kek_id):
        raise KeyDestroyedError(f"{kek_id[:40]!r} is not a key-encryption key version of tenant {tenant!r}")
    return int(kek_id[1:])
