"""The auditor's web application: server-rendered pages (Starlette, Jinja2), no JavaScript, read-only.

Every page but /login and /healthz needs a principal. A tenant's principal sees its own decisions
only: another tenant's decision id answers 404, exactly as an unknown id does, and a list filtered
by another tenant answers 403. An erased case's decisions are listed as erased and their pages say
so: each page asks the key topic before it shows a decision's content, so from the moment an
erasure's tombstone is stored (the step that destroys the key, whichever process erased) no page
serves that content, and the index drops it at its next refresh. "Replay now" reads and
recomputes; it writes nothing anywhere. A contest (decisive events, an adverse decision's reasons,
a what-if) is the one thing a page writes: its record, on the contests topic, never the decision.
Who may ask for one is DPM_UI_CONTEST's choice, and each principal may ask
DPM_UI_CONTESTS_PER_MINUTE of them a minute (429 beyond).

A browser signs in once and then holds a session cookie; its POSTs must come from these pages
(Origin) and carry the session's anti-forgery token. A client that keeps presenting wrong tokens
is answered 429 with Retry-After.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pipeline.config.settings import UiSettings
from pipeline.core.contest import NO_REASONS, NOT_ADVICE, EventChange, leave_out
from pipeline.core.errors import DpmError
from pipeline.core.events import CaseRef
from pipeline.core.explanation import fact_rows
from pipeline.core.task import Architecture
from pipeline.core.verification import ReplayReport
from pipeline.services.audit_index import (
    Cursor,
    DecisionFilter,
    ErasedDecision,
    IndexedDecision,
    Listed,
    ListPage,
    page_cursor,
    page_token,
)
from pipeline.services.auditor import CaseEvents
from pipeline.services.contest import ContestAsk, ContestDone, is_adverse_label
from pipeline.ui.auth import COOKIE, LOGIN_COOKIE, Principal, Tokens, bearer, client_of, same_origin
from pipeline.ui.pages import cited_events, parse_when, when
from pipeline.ui.sessions import Sessions
from pipeline.ui.throttle import Throttle
from pipeline.wire.audit import AuditRecord
from pipeline.wire.contest import Asker, ContestKind
from pipeline.wire.trigger import DecisionId, InvalidDecisionIdError

_LOG = logging.getLogger("pipeline.ui")
PER_PAGE = 50
# No script runs on these pages; styles are inline in the one template that holds them. The referrer
# policy is same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with every
# POST, and the POSTs' origin check needs the real one.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Viewer:
    """Who is asking, and the anti-forgery token its forms carry (empty for a Bearer client, which needs none)."""

    principal: Principal
    csrf: str = ""


class Auditor(Protocol):
    """What the pages read: pages of the lookup index, and per decision its events, audit records and a replay."""

    def listing(self, wanted: DecisionFilter, limit: int, *, before: Cursor | None = None,
                after: Cursor | None = None) -> ListPage:  # fmt: skip
        """One page of the decisions `wanted`, newest first: the first, or the one before `before` or after `after`."""
        ...

    def labels(self, tenant: str | None) -> list[str]:
        """The labels to filter by (of one tenant, or all)."""
        ...

    def decided(self) -> int:
        """How many decision records are indexed (no content, no tenant: what /healthz says)."""
        ...

    def lookup(self, tenant: str, decision_id: DecisionId) -> Listed | None:
        """The tenant's decision of this id, any ever published (the lookup index); DpmError when unreadable."""
        ...

    def erased(self, items: Sequence[IndexedDecision]) -> set[CaseRef]:
        """The cases of `items` erased, as the key topics say now (read at each call); DpmError when unreadable."""
        ...

    def events(self, item: IndexedDecision) -> CaseEvents: ...

    def audits(self, item: IndexedDecision) -> list[AuditRecord]: ...

    def replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport:
        """`item` re-derived from its recorded offsets, with its audit records (read already for the page)."""
        ...

    def contest(self, item: IndexedDecision, audits: list[AuditRecord], events: CaseEvents,
                ask: ContestAsk) -> ContestDone:  # fmt: skip
        """Makes and publishes the contest asked of `item` (services/auditor.py); raises DpmError when it cannot."""
        ...


class _Pages:
    def __init__(self, auditor: Auditor, tokens: Tokens, sessions: Sessions, throttle: Throttle,
                 ui: UiSettings) -> None:  # fmt: skip
        self.auditor, self.tokens, self.sessions, self.throttle = auditor, tokens, sessions, throttle
        self.contest_right = ui.contest
        # Each contest asks a model: a principal is held to so many a minute, counted like wrong tokens.
        self.contests = Throttle(limit=ui.contests_per_minute, window_s=60.0, block_s=60.0)
        concurrency = ui.concurrency
        # Decision pages read and render this many at once. More threads at once only fight over the
        # interpreter lock (20 readers: 86 pages/s unbounded, 125 bounded to 2, on 2 cores); a
        # replay's model calls run outside this bound, so a slow model never holds pages back.
        self._work = threading.BoundedSemaphore(concurrency)
        self.templates = Environment(
            loader=FileSystemLoader(Path(__file__).with_name("templates")),
            autoescape=select_autoescape(default=True),
            auto_reload=False,
        )
        self.templates.filters["when"] = when
        self.templates.filters["q"] = lambda value: quote(str(value), safe="")
        self.templates.tests["erased"] = lambda value: isinstance(value, ErasedDecision)

    def render(self, name: str, status: int = 200, viewer: Viewer | None = None, **context: object) -> HTMLResponse:
        principal, csrf = (viewer.principal, viewer.csrf) if viewer is not None else (None, "")
        html = self.templates.get_template(name).render(principal=principal, csrf=csrf, **context)
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def _viewer(self, request: Request) -> Viewer | Response:
        """A Bearer token's principal (throttled when wrong), else the session's; else off to sign in."""
        token = bearer(request)
        if token is not None:
            client = client_of(request)
            wait = self.throttle.retry_after(client)
            if wait is not None:
                return _too_many(wait)
            principal = self.tokens.principal(token)
            if principal is None:
                self.throttle.failed(client)
                return PlainTextResponse("invalid token", status_code=401, headers=_HEADERS)
            return Viewer(principal)
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is not None:
            return Viewer(session.principal, session.csrf)
        return RedirectResponse(f"/login?next={quote(request.url.path, safe='/')}", status_code=303, headers=_HEADERS)

    async def _poster(self, request: Request) -> tuple[Viewer, FormData] | Response:
        """The viewer of a POST and its form; a browser's must come from these pages with its anti-forgery token.

        A Bearer client needs neither: a browser never adds that header to a request another site makes.
        """
        form = await request.form()
        if bearer(request) is None:
            if not same_origin(request):
                return PlainTextResponse("cross-site request refused", status_code=403, headers=_HEADERS)
            session = self.sessions.get(request.cookies.get(COOKIE))
            if session is not None and not hmac.compare_digest(str(form.get("csrf") or ""), session.csrf):
                return PlainTextResponse("the form is stale: load the page again", status_code=403, headers=_HEADERS)
        viewer = self._viewer(request)
        return viewer if isinstance(viewer, Response) else (viewer, form)

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
        return self.auditor.lookup(tenant, decision_id)

    def _found(self, viewer: Viewer, tenant: str | None, raw_id: str | None) -> Listed | Response:
        """The decision the page asks for, or the page that says why not (404 for unknown and foreign alike)."""
        try:
            item = self._item(viewer.principal, tenant, raw_id)
        except DpmError as exc:
            return self.render("error.html", 503, viewer, message=f"The decision could not be looked up: {exc}")
        return self._not_found(viewer) if item is None else item

    def _not_found(self, viewer: Viewer) -> HTMLResponse:
        return self.render("error.html", 404, viewer, message="No such decision.")

    def _login_page(self, request: Request, target: str, status: int = 200, *, failed: bool = False) -> Response:
        """The sign-in form, with a fresh anti-forgery token in the form and in a cookie of its own."""
        login_token = secrets.token_urlsafe(32)
        response = self.render("login.html", status, next=target, failed=failed, login_token=login_token)
        response.set_cookie(LOGIN_COOKIE, login_token, max_age=3600, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")  # fmt: skip
        return response

    # --- routes ---

    async def login_form(self, request: Request) -> Response:
        return self._login_page(request, _local(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        """Signs a browser in: same-site form, its anti-forgery token, throttled token checks, then a session."""
        client = client_of(request)
        wait = self.throttle.retry_after(client)
        if wait is not None:
            return _too_many(wait)
        form = await request.form()
        expected = request.cookies.get(LOGIN_COOKIE) or ""
        if not same_origin(request) or not expected or not hmac.compare_digest(str(form.get("login_token") or ""),
                                                                                 expected):  # fmt: skip
            return PlainTextResponse("sign-in refused: load the sign-in page again", status_code=403, headers=_HEADERS)
        target = _local(str(form.get("next") or ""))
        principal = self.tokens.principal(str(form.get("token") or ""))
        if principal is None:
            self.throttle.failed(client)
            return self._login_page(request, target, 401, failed=True)
        session_id, _ = self.sessions.start(principal)
        response = RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
        response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        response.delete_cookie(LOGIN_COOKIE)
        return response

    async def logout(self, request: Request) -> Response:
        posted = await self._poster(request)
        if isinstance(posted, Response):
            return posted
        self.sessions.end(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303, headers={"Cache-Control": "no-store"})
        response.delete_cookie(COOKIE)
        return response

    async def healthz(self, _request: Request) -> Response:
        return PlainTextResponse(f"ok: {self.auditor.decided()} decisions indexed")

    async def home(self, _request: Request) -> Response:
        return RedirectResponse("/decisions", status_code=303)

    def decisions(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if isinstance(viewer, Response):
            return viewer
        principal, params = viewer.principal, request.query_params
        asked_tenant = params.get("tenant") or None
        if asked_tenant is not None and not principal.may_read(asked_tenant):
            return self.render("error.html", 403, viewer, message="Not your tenant.")
        try:
            wanted = DecisionFilter(
                tenant=principal.tenant or asked_tenant,
                case_id=params.get("case") or None,
                architecture=Architecture(params["architecture"]) if params.get("architecture") else None,
                label=params.get("label") or None,
                since_ms=parse_when(params.get("since")),
                until_ms=parse_when(params.get("until")),
            )
            before, after = (page_cursor(params[k]) if params.get(k) else None for k in ("before", "after"))
        except ValueError as exc:
            return self.render("error.html", 400, viewer, message=f"Bad filter: {exc}")
        try:
            page = self.auditor.listing(wanted, PER_PAGE, before=before, after=after)
            labels = self.auditor.labels(principal.tenant)
        except DpmError as exc:
            return self.render("error.html", 503, viewer, message=f"The decisions could not be read: {exc}")
        try:
            if self._drop_erased([i for i in page.items if isinstance(i, IndexedDecision)]):
                page = self.auditor.listing(wanted, PER_PAGE, before=before, after=after)
        except DpmError as exc:
            return self.render("error.html", 503, viewer, message=f"The key topic could not be read: {exc}")
        return self.render("list.html", viewer=viewer, page=page, params=params, labels=labels,
                           newer=None if page.newer is None else page_token(page.newer),
                           older=None if page.older is None else page_token(page.older))  # fmt: skip

    def decision(self, request: Request) -> Response:
        viewer = self._viewer(request)
        if isinstance(viewer, Response):
            return viewer
        params = request.query_params
        item = self._found(viewer, params.get("tenant"), params.get("id"))
        if isinstance(item, Response):
            return item
        return self._decision_page(viewer, item, replay=False)

    async def replay(self, request: Request) -> Response:
        posted = await self._poster(request)
        if isinstance(posted, Response):
            return posted
        viewer, form = posted
        return await run_in_threadpool(self._replayed, viewer, str(form.get("tenant") or ""),
                                       str(form.get("id") or ""))  # fmt: skip

    def _replayed(self, viewer: Viewer, tenant: str, raw_id: str) -> Response:
        item = self._found(viewer, tenant, raw_id)
        if isinstance(item, Response):
            return item
        return self._decision_page(viewer, item, replay=True)

    def may_contest(self, principal: Principal) -> bool:
        return self.contest_right == "all" or (self.contest_right == "admin" and principal.is_admin)

    async def contest(self, request: Request) -> Response:
        """Decisive events, an adverse decision's reasons or a what-if, asked from the decision's page."""
        posted = await self._poster(request)
        if isinstance(posted, Response):
            return posted
        viewer, form = posted
        if not self.may_contest(viewer.principal):
            return self.render("error.html", 403, viewer, message="You may read this decision, not contest it.")
        wait = self.contests.retry_after(viewer.principal.name)
        if wait is not None:
            headers = {**_HEADERS, "Retry-After": str(wait)}
            return PlainTextResponse(f"too many contests: try again in {wait} s", status_code=429, headers=headers)
        try:
            ask = _contest_ask(viewer.principal, form)
        except (ValueError, DpmError) as exc:
            return self.render("error.html", 400, viewer, message=f"Bad contest: {exc}")
        self.contests.failed(viewer.principal.name)
        return await run_in_threadpool(self._contested, viewer, str(form.get("tenant") or ""),
                                       str(form.get("id") or ""), ask)  # fmt: skip

    def _contested(self, viewer: Viewer, tenant: str, raw_id: str, ask: ContestAsk) -> Response:
        item = self._found(viewer, tenant, raw_id)
        if isinstance(item, Response):
            return item
        return self._decision_page(viewer, item, replay=False, contest=ask)

    def _replay(self, item: IndexedDecision, audits: list[AuditRecord]) -> ReplayReport | str:
        try:
            return self.auditor.replay(item, audits)
        except DpmError as exc:
            return f"replay could not run: {exc}"

    def _drop_erased(self, items: Sequence[IndexedDecision]) -> bool:
        """Whether any case of `items` is erased, as the key topic says now (the auditor marks them in its index)."""
        return bool(self.auditor.erased(items)) if items else False

    def _decision_page(
        self, viewer: Viewer, item: Listed, *, replay: bool, contest: ContestAsk | None = None
    ) -> Response:
        """The decision's page, after replaying it when `replay`, or contesting it (an erased case has neither).

        Erased is what the key topic says now, not what the index last read: content is never shown
        from the moment the case's key is destroyed; a key topic that cannot be read shows none (503).
        """
        if isinstance(item, IndexedDecision):
            try:
                if self._drop_erased([item]):
                    item = ErasedDecision(item.decision_id, item.case, item.decided_ms)
            except DpmError as exc:
                return self.render("error.html", 503, viewer, message=f"The key topic could not be read: {exc}")
        if isinstance(item, ErasedDecision):
            return self.render("erased.html", viewer=viewer, item=item)
        other_arch = Architecture.SUMM if item.decision_id.architecture is Architecture.DPM else Architecture.DPM
        try:
            other = self.auditor.lookup(item.case.tenant, DecisionId(item.decision_id.trigger_id, other_arch))
        except DpmError:
            other = None  # the other architecture's decision is a link, not the page
        if other is not None and other.case != item.case:
            other = None  # the same trigger id for another case is another trigger
        try:
            with self._work:
                events = self.auditor.events(item)
                audits = self.auditor.audits(item)
        except DpmError as exc:
            return self.render("error.html", 503, viewer, message=f"The log could not be read: {exc}")
        replayed = self._replay(item, audits) if replay else None
        contested: ContestDone | str | None = None
        if contest is not None:
            try:
                contested = self.auditor.contest(item, audits, events, contest)
            except DpmError as exc:
                contested = f"the contest could not be made: {exc}"
        view = item.view.view if item.view is not None else None
        trajectory = events.trajectory
        with self._work:
            return self.render(
                "decision.html",
                viewer=viewer,
                item=item,
                record=item.record,
                view_text=item.view.text if item.view is not None else None,
                facts=fact_rows(view, trajectory) if view is not None else [],
                cited=cited_events(view, trajectory) if view is not None and trajectory is not None else [],
                events=events,
                audits=audits,
                other=other,
                replayed=replayed,
                contested=contested,
                may_contest=self.may_contest(viewer.principal),
                adverse=is_adverse_label(item.record),
                no_reasons=NO_REASONS,
                not_advice=NOT_ADVICE,
            )


def _contest_ask(principal: Principal, form: FormData) -> ContestAsk:
    """The contest a page's form asks for; ValueError (or ContestError) for one it cannot be."""
    try:
        kind = ContestKind(str(form.get("kind") or ""))
    except ValueError:
        raise ValueError("ask for decisive events, reasons or a what-if") from None
    why = str(form.get("why") or "")[:500]
    changes: tuple[EventChange, ...] = ()
    if kind is ContestKind.WHATIF:
        dropped = [part.strip() for part in str(form.get("drop") or "").split(",") if part.strip()]
        if not dropped or not all(part.isdigit() for part in dropped):
            raise ValueError("name the events to leave out by number, e.g. 3,7")
        changes = leave_out(*(int(part) for part in dropped))
    return ContestAsk(kind, Asker(f"ui:{principal.name}", int(time.time() * 1000), why), changes=changes)


def _too_many(wait_s: int) -> Response:
    """429: too many wrong tokens from this client; try again after `wait_s`."""
    headers = {**_HEADERS, "Retry-After": str(wait_s)}
    return PlainTextResponse(f"too many wrong tokens: try again in {wait_s} s", status_code=429, headers=headers)


def _local(target: str | None) -> str:
    """A redirect target on this site only (a path, never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/decisions"
    return target


def create_app(auditor: Auditor, tokens: Tokens, settings: UiSettings | None = None,
               throttle: Throttle | None = None) -> Starlette:  # fmt: skip
    """The application; `tokens` must name at least one principal (Tokens refuses an empty set).

    Sessions and the number of decision pages read and rendered at once follow `settings`
    (DPM_UI_SESSION_IDLE_S, DPM_UI_SESSION_MAX_S, DPM_UI_CONCURRENCY; their defaults when None).
    """
    ui = settings or UiSettings.model_validate({})
    sessions = Sessions(ui.session_idle_s, ui.session_max_s)
    pages = _Pages(auditor, tokens, sessions, throttle or Throttle(), ui)
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
            Route("/decision/contest", pages.contest, methods=["POST"]),
        ]
    )
