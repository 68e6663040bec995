"""API keys of the HTTP API (`dpm api`): made per tenant, printed once, kept only as hashes, revocable.

A key is `dpm_<id>_<secret>`: the id names the stored entry, the secret (32 random bytes) is kept
only as its SHA-256 (a key is not a password: its entropy makes a slow hash pointless). The file is
written whole and replaced atomically, readable by its owner only; every replica of the API reads
it again when it changes, so a key removed is refused at once everywhere the file is shared (a
mounted secret on Kubernetes). A change (add, remove) reads and writes the file under an exclusive
lock on a sibling file (`.<name>.lock`), so changes made at once by several processes are applied
one after the other: none brings back a key another removed or loses one another added. Removing a
tenant (`dpm tenants remove`, or `dpm tenants add --replace` of an earlier one) removes its keys.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from pipeline.config.settings import Settings
from pipeline.core.errors import DpmError
from pipeline.core.events import check_identifier

ADMIN = "*"  # the tenant of an admin key: it acts for any tenant, and may erase a case
_PREFIX = "dpm_"


class ApiKeyError(DpmError):
    """The API keys file cannot be read or written, or names no such key."""


@dataclass(frozen=True)
class ApiKey:
    """A stored key: its id, its tenant (ADMIN for an admin key), the SHA-256 of its secret, when it was made."""

    key_id: str
    tenant: str
    secret_sha256: str
    created: str

    @property
    def admin(self) -> bool:
        return self.tenant == ADMIN

    def to_json(self) -> dict[str, str]:
        return {"id": self.key_id, "tenant": self.tenant, "secret_sha256": self.secret_sha256, "created": self.created}


def keys_file(settings: Settings) -> Path:
    """DPM_API_KEYS_FILE, else `$DPM_HOME/api-keys.json`."""
    return settings.api.keys_file or settings.paths.home / "api-keys.json"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class ApiKeys:
    """The keys of one file, read again whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None  # (mtime, size) of the file last read
        self._keys: dict[str, ApiKey] = {}

    def _current(self) -> dict[str, ApiKey]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        seen = (stat.st_mtime, stat.st_size)
        with self._lock:
            if seen != self._seen:
                self._keys = self._read()
                self._seen = seen
            return self._keys

    def _read(self) -> dict[str, ApiKey]:
        try:
            raw = orjson.loads(self.path.read_bytes())
            return {k["id"]: ApiKey(k["id"], k["tenant"], k["secret_sha256"], k["created"]) for k in raw["keys"]}
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ApiKeyError(f"{self.path}: not an API keys file ({exc})") from exc

    def listed(self) -> list[ApiKey]:
        return sorted(self._current().values(), key=lambda k: (k.tenant, k.created))

    def bearer(self, authorization: str) -> ApiKey | None:
        """The stored key an `Authorization` header presents, as every door reads it (HTTP API, MCP over HTTP).

        RFC 6750's `Bearer <key>`: the scheme in any case, then one or more spaces; None for any other.
        """
        scheme, _, presented = authorization.partition(" ")
        return self.holder(presented.strip(" ")) if scheme.lower() == "bearer" else None

    def holder(self, presented: str | None) -> ApiKey | None:
        """The stored key a presented key is, or None (malformed, unknown, removed, or a wrong secret)."""
        if not presented or not presented.startswith(_PREFIX):
            return None
        key_id, sep, secret = presented.removeprefix(_PREFIX).partition("_")
        stored = self._current().get(key_id) if sep else None
        if stored is None:
            hmac.compare_digest(_digest(secret), _digest("unknown"))  # the same work whether or not the id exists
            return None
        return stored if hmac.compare_digest(_digest(secret), stored.secret_sha256) else None

    def add(self, tenant: str) -> tuple[ApiKey, str]:
        """A new key for `tenant` (ADMIN for an admin key): the stored entry, and the key, shown only now."""
        if tenant != ADMIN:
            check_identifier(tenant, "tenant")
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        made = ApiKey(key_id, tenant, _digest(secret), created)
        with self._changing():
            self._write([*self._read().values(), made])
        return made, f"{_PREFIX}{key_id}_{secret}"

    def remove(self, *, key_id: str | None = None, tenant: str | None = None) -> list[ApiKey]:
        """Removes one key by id, or every key of a tenant; returns what was removed."""
        kept: list[ApiKey] = []
        removed: list[ApiKey] = []
        with self._changing():
            for key in self._read().values():
                (removed if key.key_id == key_id or (tenant is not None and key.tenant == tenant) else kept).append(key)
            if key_id is not None and not removed:
                raise ApiKeyError(f"no API key {key_id!r} in {self.path}")
            if removed:
                self._write(kept)
        return removed

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Holds the keys file's exclusive lock (other processes' changes wait) while it is read and replaced.

        The lock is on a sibling file, not on the keys file: the atomic replace gives the keys file a
        new inode, and a lock held on the old one would not keep the next writer out.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(f".{self.path.name}.lock")
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ApiKeyError(f"{lock}: {exc.strerror}") from exc
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # released by the close, even if this process dies
            yield
        finally:
            os.close(descriptor)

    def _write(self, keys: list[ApiKey]) -> None:
        """The whole file, replaced atomically, readable by its owner only."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(orjson.dumps({"keys": [k.to_json() for k in keys]}, option=orjson.OPT_INDENT_2))
            temporary.replace(self.path)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise ApiKeyError(f"{self.path}: {exc.strerror}") from exc
