"""Who is asking: a tenant's token reads that tenant's decisions only; the admin token reads all.

A token comes as `Authorization: Bearer <token>` (scripts) or once, on the sign-in page, after
which the browser holds a session cookie (pipeline.ui.sessions), never the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr
from starlette.requests import Request

from pipeline.config.settings import UiSettings
from pipeline.core.errors import DpmError

COOKIE = "dpm_ui_session"  # the signed-in browser's session id
LOGIN_COOKIE = "dpm_ui_login"  # the sign-in form's anti-forgery token, set with the form


@dataclass(frozen=True)
class Principal:
    """A signed-in reader: `tenant` None is the admin, who reads every tenant."""

    tenant: str | None

    @property
    def is_admin(self) -> bool:
        return self.tenant is None

    def may_read(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant

    @property
    def name(self) -> str:
        return "admin" if self.tenant is None else self.tenant


class NoTokensError(DpmError):
    """The UI would serve without authentication: no token is configured."""


class Tokens:
    """The configured tokens; every comparison is constant-time."""

    def __init__(self, tenants: Mapping[str, SecretStr], admin: SecretStr | None) -> None:
        self._known = [(t.get_secret_value().encode(), Principal(tenant)) for tenant, t in tenants.items()]
        if admin is not None:
            self._known.append((admin.get_secret_value().encode(), Principal(None)))
        if not self._known:
            raise NoTokensError("the UI serves nobody without a token: set DPM_UI_TOKENS and/or DPM_UI_ADMIN_TOKEN")

    @classmethod
    def from_settings(cls, settings: UiSettings) -> Tokens:
        return cls(settings.tokens, settings.admin_token)

    def principal(self, presented: str | None) -> Principal | None:
        """The principal whose token this is, or None. Every known token is compared, match or not."""
        if not presented:
            return None
        given = presented.encode()
        found = None
        for token, principal in self._known:
            if hmac.compare_digest(token, given):
                found = principal
        return found


def bearer(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if the request has one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from this site's own pages (Origin, else Referer).

    A browser sends Origin with every POST; a cross-site form or a page with a `null` origin fails.
    The site is the one the request was made to (behind a trusted proxy: the forwarded scheme).
    """
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    parts = urlsplit(request.headers.get("referer", ""))
    return bool(parts.scheme) and f"{parts.scheme}://{parts.netloc}" == own


def client_of(request: Request) -> str:
    """The client's address (behind a trusted proxy: the one it forwards), for throttling."""
    return request.client.host if request.client is not None else "unknown"
