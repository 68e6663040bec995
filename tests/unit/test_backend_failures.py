"""A hosted backend that gets no answer says, in one line, why, where it called, and what fixes it.

One suite run against both hosted backends, each through its own SDK against the local fake APIs
(faults injected) or a closed loopback port: the line names the cause, the base URL and the setting
or command that fixes it, and never the API key, the provider's error text or the case's content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson
import pytest

from pipeline.core.model import ModelBackend, ModelBackendError
from pipeline.core.prompt import projection_request
from pipeline.llm.anthropic_backend import AnthropicBackend
from pipeline.llm.failures import Cause, connection_cause, public_url
from pipeline.llm.openai_backend import OpenAIBackend
from tests.conftest import free_port
from tests.fake_model_apis import Fault, MessagesApiState, error_body, messages_api
from tests.unit.backend_contract import BUDGET, CASE

REQUEST = projection_request(CASE.trajectory, CASE.task, BUDGET)
KEY = "sk-test-0123456789abcdef"
# What a provider may say back: a masked key and a piece of the prompt. Neither may reach the line.
QUOTED = f"Incorrect API key provided: {KEY[:6]}***; prompt began {CASE.trajectory.events[0].text[:40]!r}"
OFFLINE = "DPM_BACKEND=extractive"


@dataclass(frozen=True)
class Hosted:
    """One hosted backend: how it is built on a base URL, its settings' names, and its SDK's error bodies."""

    build: Callable[[str, float, int], ModelBackend]
    url_setting: str
    key_setting: str
    error: Callable[[str, str], bytes]  # (type, message) -> body


def _anthropic(url: str, timeout_s: float, retries: int) -> ModelBackend:
    return AnthropicBackend(KEY, base_url=url, timeout_s=timeout_s, max_retries=retries)


def _openai(url: str, timeout_s: float, retries: int) -> ModelBackend:
    return OpenAIBackend(f"{url}/v1", "fake-model", api_key=KEY, timeout_s=timeout_s, max_retries=retries)


def _openai_error(kind: str, message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": None}})


BACKENDS = {
    "anthropic": Hosted(_anthropic, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", error_body),
    "openai": Hosted(_openai, "DPM_OPENAI_BASE_URL", "DPM_OPENAI_API_KEY", _openai_error),
}


@pytest.fixture(params=sorted(BACKENDS))
def hosted(request: pytest.FixtureRequest) -> Hosted:
    return BACKENDS[request.param]


@pytest.fixture
def api() -> Iterator[tuple[str, MessagesApiState]]:
    with messages_api() as served:
        yield served


def _failure(backend: ModelBackend) -> str:
    with pytest.raises(ModelBackendError) as failed:
        backend.complete(REQUEST)
    line = str(failed.value)
    assert "\n" not in line
    assert KEY not in line
    assert KEY[:6] not in line
    assert "Incorrect API key" not in line
    assert not any(event.text[:20] in line for event in CASE.trajectory.events)
    assert OFFLINE in line
    return line


def test_a_closed_loopback_port_is_connection_refused_and_the_fix_starts_the_local_server(hosted: Hosted) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = _failure(hosted.build(url, 5.0, 1))
    assert "connection refused" in line
    assert url in line
    assert "tried 2 times" in line
    assert "dpm model up" in line
    assert hosted.url_setting in line


def test_a_host_that_does_not_resolve_is_a_dns_failure_naming_the_url_setting(hosted: Hosted) -> None:
    line = _failure(hosted.build("http://dpm-model.invalid:8080", 5.0, 0))
    assert "DNS failure" in line
    assert "http://dpm-model.invalid:8080" in line
    assert f"correct the host in {hosted.url_setting}" in line
    assert "dpm model up" not in line  # not this machine: starting a local server would not help


@pytest.mark.parametrize(
    ("status", "kind", "cause", "fix"),
    [
        (400, "invalid_request_error", "HTTP 400 request refused", "see its log"),
        (401, "authentication_error", "HTTP 401 unauthorized", "{key} to a valid API key"),
        (404, "not_found_error", "HTTP 404 not found", "DPM_MODEL to a model the server serves"),
        (429, "rate_limit_error", "HTTP 429 rate limited", "DPM_MODEL_CONCURRENCY"),
        (500, "api_error", "HTTP 500 server error", "see its log"),
        (503, "api_error", "HTTP 503 server error", "see its log"),
        (529, "overloaded_error", "HTTP 529 server error", "see its log"),
    ],
)
def test_an_error_status_names_its_cause_the_endpoint_and_the_setting_that_fixes_it(
    hosted: Hosted, api: tuple[str, MessagesApiState], status: int, kind: str, cause: str, fix: str
) -> None:
    url, state = api
    state.faults.append(Fault(status, hosted.error(kind, QUOTED)))
    line = _failure(hosted.build(url, 5.0, 0))
    assert f"{cause} ({kind})" in line  # the provider's error code, its message left out
    assert url in line
    assert fix.format(key=hosted.key_setting) in line


def test_a_timeout_names_the_time_and_the_timeout_setting(hosted: Hosted, api: tuple[str, MessagesApiState]) -> None:
    url, state = api
    state.faults.append(Fault(delay_s=1.5))
    line = _failure(hosted.build(url, 0.5, 0))
    assert "timed out after 0.5 s" in line
    assert "DPM_MODEL_TIMEOUT_S" in line


def test_a_malformed_answer_names_the_api_the_server_must_speak(
    hosted: Hosted, api: tuple[str, MessagesApiState]
) -> None:
    url, state = api
    state.faults.append(Fault(200, b'{"not": "an answer", "echo": "' + QUOTED.encode() + b'"}'))
    line = _failure(hosted.build(url, 5.0, 0))
    assert "malformed answer" in line
    assert hosted.url_setting in line


def test_the_url_shown_keeps_no_credentials_query_or_fragment() -> None:
    assert public_url("https://user:pw@gateway.example:8443/v1/?api-key=k#x") == "https://gateway.example:8443/v1"
    assert public_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"
    assert public_url("http://host:notaport/v1") == "the configured base URL"


def test_a_connection_error_is_told_by_the_os_error_it_was_raised_from() -> None:
    def raised_from(cause: BaseException) -> BaseException:
        try:
            try:
                raise cause
            except OSError as exc:
                raise RuntimeError("Connection error.") from exc
        except RuntimeError as outer:
            return outer

    assert connection_cause(raised_from(ConnectionRefusedError(111, "refused"))) is Cause.REFUSED
    assert connection_cause(raised_from(ConnectionResetError(104, "reset"))) is Cause.CONNECTION
