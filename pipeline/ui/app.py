"""The auditor's web application: server-rendered pages (Starlette, Jinja2), no JavaScript, read-only.

Every page but /login and /healthz needs a principal. A tenant's principal sees its own decisions
only: another tenant's decision id answers 404, exactly as an unknown id does, and a list filtered
by another tenant answers 403. The one POST that does work, "replay now", reads and recomputes;
it writes nothing anywhere.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pipeline.core.errors import DpmError
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayReport
from pipeline.services.audit_index import DecisionFilter, DecisionIndex, ErasedDecision, IndexedDecision, Listed
from pipeline.services.auditor import CaseEvents
from pipeline.ui.auth import COOKIE, Principal, Tokens
from pipeline.ui.pages import cited_events, fact_rows, parse_when, when
from pipeline.wire.audit import AuditRecord
from pipeline.wire.trigger import DecisionId, InvalidDecisionIdError

_LOG = logging.getLogger("pipeline.ui")
PER_PAGE = 50
# No script runs on these pages; styles are inline in the one template that holds them.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Auditor(Protocol):
    """What the pages read: the index, and per decision its events, its audit records and a replay."""

    @property
    def index(self) -> DecisionIndex: ...

    def events(self, item: IndexedDecision) -> CaseEvents: ...

    def audits(self, item: IndexedDecision) -> list[AuditRecord]: ...

    def replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport:
        """`item` re-derived from its recorded offsets, with its audit records (read already for the page)."""
        ...


class _Pages:
    def __init__(self, auditor: Auditor, tokens: Tokens) -> None:
        self.auditor, self.tokens = auditor, tokens
        self.templates = Environment(
            loader=FileSystemLoader(Path(__file__).with_name("templates")),
            autoescape=select_autoescape(default=True),
            auto_reload=False,
        )
        self.templates.filters["when"] = when
        self.templates.filters["q"] = lambda value: quote(str(value), safe="")
        self.templates.tests["erased"] = lambda value: isinstance(value, ErasedDecision)

    def render(self, name: str, status: int = 200, **context: object) -> HTMLResponse:
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def _principal(self, request: Request) -> Principal | Response:
        principal = self.tokens.of_request(request)
        if principal is not None:
            return principal
        if request.headers.get("authorization"):
            return PlainTextResponse("invalid token", status_code=401, headers=_HEADERS)
        return RedirectResponse(f"/login?next={quote(request.url.path, safe='/')}", status_code=303)

    def _item(self, principal: Principal, tenant: str | None, raw_id: str | None) -> Listed | None:
        """The tenant's decision of this id if the principal may read it; None for unknown and foreign alike.

        A tenant's principal names no tenant (its own is taken); the admin names one.
        """
        tenant = tenant or principal.tenant
        if tenant is None or not principal.may_read(tenant):
            return None
        try:
            decision_id = DecisionId.parse(raw_id or "")
        except InvalidDecisionIdError:
            return None
        return self.auditor.index.get(tenant, decision_id)

    def _not_found(self, principal: Principal) -> HTMLResponse:
        return self.render("error.html", 404, principal=principal, message="No such decision.")

    # --- routes ---

    async def login_form(self, request: Request) -> Response:
        return self.render("login.html", next=_local(request.query_params.get("next")), failed=False)

    async def login(self, request: Request) -> Response:
        form = await request.form()
        target = _local(str(form.get("next") or ""))
        principal = self.tokens.principal(str(form.get("token") or ""))
        if principal is None:
            return self.render("login.html", 401, next=target, failed=True)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, str(form.get("token")), httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")  # fmt: skip
        return response

    async def logout(self, _request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    async def healthz(self, _request: Request) -> Response:
        return PlainTextResponse(f"ok: {len(self.auditor.index)} decisions indexed")

    async def home(self, _request: Request) -> Response:
        return RedirectResponse("/decisions", status_code=303)

    def decisions(self, request: Request) -> Response:
        principal = self._principal(request)
        if not isinstance(principal, Principal):
            return principal
        params = request.query_params
        asked_tenant = params.get("tenant") or None
        if asked_tenant is not None and not principal.may_read(asked_tenant):
            return self.render("error.html", 403, principal=principal, message="Not your tenant.")
        try:
            wanted = DecisionFilter(
                tenant=principal.tenant or asked_tenant,
                case_id=params.get("case") or None,
                architecture=Architecture(params["architecture"]) if params.get("architecture") else None,
                label=params.get("label") or None,
                since_ms=parse_when(params.get("since")),
                until_ms=parse_when(params.get("until")),
            )
            number = int(params.get("page") or 1)
        except ValueError as exc:
            return self.render("error.html", 400, principal=principal, message=f"Bad filter: {exc}")
        page = self.auditor.index.query(wanted, number, PER_PAGE)
        return self.render("list.html", principal=principal, page=page, params=params,
                           labels=self.auditor.index.labels(principal.tenant))  # fmt: skip

    def decision(self, request: Request) -> Response:
        principal = self._principal(request)
        if not isinstance(principal, Principal):
            return principal
        params = request.query_params
        item = self._item(principal, params.get("tenant"), params.get("id"))
        if item is None:
            return self._not_found(principal)
        return self._decision_page(principal, item, replay=False)

    async def replay(self, request: Request) -> Response:
        principal = self._principal(request)
        if not isinstance(principal, Principal):
            return principal
        form = await request.form()
        return await run_in_threadpool(self._replayed, principal, str(form.get("tenant") or ""),
                                       str(form.get("id") or ""))  # fmt: skip

    def _replayed(self, principal: Principal, tenant: str, raw_id: str) -> Response:
        item = self._item(principal, tenant, raw_id)
        if item is None:
            return self._not_found(principal)
        return self._decision_page(principal, item, replay=True)

    def _replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport | str:
        try:
            return self.auditor.replay(item, audits)
        except DpmError as exc:
            return f"replay could not run: {exc}"

    def _decision_page(self, principal: Principal, item: Listed, *, replay: bool) -> Response:
        """The decision's page, after replaying it when `replay` (an erased case has nothing to replay)."""
        if isinstance(item, ErasedDecision):
            return self.render("erased.html", principal=principal, item=item)
        other_arch = Architecture.SUMM if item.decision_id.architecture is Architecture.DPM else Architecture.DPM
        other = self.auditor.index.get(item.case.tenant, DecisionId(item.decision_id.trigger_id, other_arch))
        if other is not None and other.case != item.case:
            other = None  # the same trigger id for another case is another trigger
        try:
            events = self.auditor.events(item)
            audits = self.auditor.audits(item)
        except DpmError as exc:
            return self.render("error.html", 503, principal=principal, message=f"The log could not be read: {exc}")
        view = item.view.view if item.view is not None else None
        trajectory = events.trajectory
        return self.render(
            "decision.html",
            principal=principal,
            item=item,
            record=item.record,
            view_text=item.view.text if item.view is not None else None,
            facts=fact_rows(view, trajectory) if view is not None else [],
            cited=cited_events(view, trajectory) if view is not None and trajectory is not None else [],
            events=events,
            audits=audits,
            other=other,
            replayed=self._replay(item, audits) if replay else None,
        )


def _local(target: str | None) -> str:
    """A redirect target on this site only (a path, never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/decisions"
    return target


def create_app(auditor: Auditor, tokens: Tokens) -> Starlette:
    """The application; `tokens` must name at least one principal (Tokens refuses an empty set)."""
    pages = _Pages(auditor, tokens)
    return Starlette(
        routes=[
            Route("/", pages.home),
            Route("/healthz", pages.healthz),
            Route("/login", pages.login_form, methods=["GET"]),
            Route("/login", pages.login, methods=["POST"]),
            Route("/logout", pages.logout, methods=["POST"]),
            Route("/decisions", pages.decisions),
            Route("/decision", pages.decision),
            Route("/decision/replay", pages.replay, methods=["POST"]),
        ]
    )
