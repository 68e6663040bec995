"""A model backend's failure in one line: the cause, the endpoint, and the setting or command that fixes it.

Each backend maps its own SDK's exceptions to a `Cause` (the SDK classes stay in its module); this
module words them, the same way for every backend. A line names the base URL without credentials,
query or fragment, the model id and setting names; never a key, never the request, and never the
provider's error text, which may quote the prompt or a masked key back.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

from pipeline.core.model import ModelBackendError

OFFLINE = "or decide offline: DPM_BACKEND=extractive (dpm worker --backend extractive)"
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,40}")  # a provider's error code is shown only when it is an identifier
_CHAIN_DEPTH = 12  # how far down an exception's causes a connection failure is looked for


class Cause(StrEnum):
    """Why a call got no answer, as a user reads it."""

    REFUSED = "connection refused (nothing listens there)"
    DNS = "DNS failure (the host name does not resolve)"
    TLS = "TLS failure"
    CONNECTION = "connection failed"
    TIMEOUT = "timed out"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not found"
    RATE_LIMITED = "rate limited"
    SERVER_ERROR = "server error"
    REQUEST_REFUSED = "request refused"
    MALFORMED = "malformed answer"


# Causes the SDKs retry: the line says how many times the call was tried.
_RETRIED = frozenset({Cause.REFUSED, Cause.DNS, Cause.CONNECTION, Cause.TIMEOUT, Cause.RATE_LIMITED,
                      Cause.SERVER_ERROR})  # fmt: skip


@dataclass(frozen=True)
class Endpoint:
    """Where a backend calls and the settings that point it there, for the fix a failure names."""

    api: str  # "Messages API", "Chat Completions"
    base_url: str
    model: str
    url_setting: str
    key_setting: str
    timeout_s: float
    attempts: int

    def error(self, cause: Cause, *, status: int | None = None, code: object = None) -> ModelBackendError:
        """The failure as the one-line error the backend raises (`raise ... from` the SDK's exception)."""
        return ModelBackendError(self.describe(cause, status=status, code=code))

    def describe(self, cause: Cause, *, status: int | None = None, code: object = None) -> str:
        """`<api> at <base URL>: <cause>; <fix>; <the offline way>`; a code is shown only when it is an identifier."""
        what = cause.value if status is None else f"HTTP {status} {cause}"
        if isinstance(code, str) and _CODE.fullmatch(code):
            what = f"{what} ({code})"
        if cause is Cause.TIMEOUT:
            what = f"{what} after {self.timeout_s:g} s"
        if cause in _RETRIED and self.attempts > 1:
            what = f"{what}, tried {self.attempts} times"
        return f"{self.api} at {public_url(self.base_url)}: {what}; {self._fix(cause)}; {OFFLINE}"

    def _fix(self, cause: Cause) -> str:
        fixes = {
            Cause.REFUSED: f"start the local server (dpm model up) or set {self.url_setting} to where one listens"
            if is_loopback(self.base_url)
            else f"check that the server is up, or set {self.url_setting} to where it listens",
            Cause.DNS: f"correct the host in {self.url_setting}, or check this machine's DNS",
            Cause.TLS: f"check the scheme (http or https) in {self.url_setting} and the server's certificate",
            Cause.CONNECTION: f"check the network and {self.url_setting}",
            Cause.TIMEOUT: "raise DPM_MODEL_TIMEOUT_S, or check that the server is not overloaded",
            Cause.UNAUTHORIZED: f"set {self.key_setting} to a valid API key",
            Cause.FORBIDDEN: f"set {self.key_setting} to a key allowed to use model {self.model}",
            Cause.NOT_FOUND: f"set DPM_MODEL to a model the server serves (asked for {self.model}) and "
            f"{self.url_setting} to the API's base URL",
            Cause.RATE_LIMITED: "lower DPM_MODEL_CONCURRENCY or raise DPM_MODEL_MAX_RETRIES, or ask the provider "
            "for a higher limit",
            Cause.SERVER_ERROR: "the server failed: see its log or the provider's status page, and try again later",
            Cause.REQUEST_REFUSED: "the server refused the request: see its log for why",
            Cause.MALFORMED: f"set {self.url_setting} to a server that speaks the {self.api}",
        }
        return fixes[cause]


def connection_cause(exc: BaseException) -> Cause:
    """What a connection error comes down to, from the OS or TLS error the SDK's exception was raised from."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_DEPTH):
        if seen is None:
            break
        for found in (seen, *(a for a in seen.args if isinstance(a, BaseException))):
            if isinstance(found, socket.gaierror):
                return Cause.DNS
            if isinstance(found, ConnectionRefusedError):
                return Cause.REFUSED
            if isinstance(found, ssl.SSLError):
                return Cause.TLS
        seen = seen.__cause__ or seen.__context__
    return Cause.CONNECTION


def status_cause(status: int) -> Cause:
    """The cause an HTTP status names, for a status the SDK has no class of its own for."""
    named = {401: Cause.UNAUTHORIZED, 403: Cause.FORBIDDEN, 404: Cause.NOT_FOUND, 408: Cause.TIMEOUT,
             429: Cause.RATE_LIMITED}  # fmt: skip
    return named.get(status, Cause.SERVER_ERROR if status >= 500 else Cause.REQUEST_REFUSED)


def public_url(url: str) -> str:
    """The URL without user info, query or fragment: what may be shown of where a backend calls."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "the configured base URL"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme, host + (f":{port}" if port else ""), parts.path.rstrip("/"), "", ""))


def is_loopback(url: str) -> bool:
    """Whether the URL names this machine (where `dpm model up` serves)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
