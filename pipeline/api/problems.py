"""Errors as RFC 9457 problem details: a type, a title, the status and one line of detail, never a value sent."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

PROBLEM_TYPE = "https://dpm.dev/problems/"  # each problem's type is this followed by its slug
MEDIA_TYPE = "application/problem+json"


class Problem(Exception):  # noqa: N818 - an HTTP problem, raised to be answered as one
    """An answer that is an RFC 9457 problem document."""

    def __init__(self, status: int, slug: str, title: str, detail: str, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:  # noqa: ANN401 - JSON members  # fmt: skip
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail
        self.headers, self.extra = headers or {}, extra

    def response(self) -> JSONResponse:
        body = {"type": PROBLEM_TYPE + self.slug, "title": self.title, "status": self.status, "detail": self.detail,
                **self.extra}  # fmt: skip
        return JSONResponse(body, status_code=self.status, headers=self.headers, media_type=MEDIA_TYPE)


def unauthorized() -> Problem:
    """401: no key, a malformed, unknown or removed one (which of them is not said)."""
    return Problem(401, "unauthorized", "Unauthorized", "a valid API key is required (Authorization: Bearer <key>)",
                   {"WWW-Authenticate": "Bearer"})  # fmt: skip


def not_found(what: str) -> Problem:
    """404: unknown, or another tenant's (never 403, which would confirm it exists)."""
    return Problem(404, "not-found", "Not found", f"no such {what}")


def bad_request(detail: str) -> Problem:
    """400: a body or parameter that does not parse or validate."""
    return Problem(400, "bad-request", "Bad request", detail)


def unprocessable(slug: str, detail: str, **extra: Any) -> Problem:  # noqa: ANN401 - JSON members
    """422: a well-formed request the pipeline cannot do (unknown domain, budget, refusal)."""
    return Problem(422, slug, "Unprocessable request", detail, **extra)


def too_large(size: int | None, limit: int) -> Problem:
    """413: a body larger than DPM_API_MAX_BODY_BYTES."""
    said = f"{size} bytes" if size is not None else "the body"
    return Problem(413, "too-large", "Content too large", f"{said} exceed the limit of {limit} bytes")


def rate_limited(retry_after_s: int) -> Problem:
    """429: the key's rate is exceeded; Retry-After says when to come back."""
    return Problem(429, "rate-limited", "Too many requests", f"this key's request rate is exceeded; retry in "
                   f"{retry_after_s} s", {"Retry-After": str(retry_after_s)})  # fmt: skip
