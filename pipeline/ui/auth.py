"""Who is asking: a tenant's token reads that tenant's decisions only; the admin token reads all."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import SecretStr
from starlette.requests import Request

from pipeline.config.settings import UiSettings
from pipeline.core.errors import DpmError

COOKIE = "dpm_ui_token"


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

    def of_request(self, request: Request) -> Principal | None:
        """From `Authorization: Bearer <token>`, else from the sign-in cookie."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            return self.principal(value.strip())
        return self.principal(request.cookies.get(COOKIE))
