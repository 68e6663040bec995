"""A local HTTP server that speaks the Anthropic Messages API and OpenAI Chat Completions, for the real SDKs.

By default it answers like a model would, by running the offline extractive algorithm on the
request (as the structured JSON shape when the request asks for a JSON schema); a test can queue
faults first (status codes with headers, delays, malformed bodies).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from pipeline.core.decision import parse_decision
from pipeline.core.model import ModelRequest, Purpose
from pipeline.core.parse import parse_view
from pipeline.core.prompt import read_decision_prompt
from pipeline.llm.extractive.backend import ExtractiveBackend


@dataclass(frozen=True)
class Fault:
    """One scripted answer: an HTTP status with a body and headers, or a delay before answering normally."""

    status: int = 200
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class MessagesApiState:
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    one_slot: bool = False  # answer /slots as llama.cpp does (one slot, busy while a request is served)
    busy: int = 0  # requests being answered now
    # The Messages API's prompt cache, as documented: an entry per breakpoint prefix, five minutes.
    cache: dict[str, float] = field(default_factory=dict)
    cache_min_tokens: int = 1024
    cache_ttl_s: float = 300.0
    chat_prompts: list[tuple[str, float]] = field(default_factory=list)  # Chat Completions: (prompt, expiry)


PROPS_N_CTX = 4096  # the window the fake llama.cpp /props reports


def _purpose(system: str) -> Purpose:
    if system.startswith("You decide"):
        return Purpose.DECIDE
    if system.startswith("You maintain"):
        return Purpose.SUMMARIZE
    return Purpose.PROJECT


def _structured(request: ModelRequest, text: str) -> str:
    """The extractive answer in the JSON shape a schema-enforcing server returns."""
    if request.purpose is Purpose.DECIDE:
        decision = parse_decision(text, read_decision_prompt(request.prompt).task.label_space)
        return orjson.dumps({"decision": decision.label, "rationale": decision.rationale,
                             "notice": decision.notice}).decode()  # fmt: skip
    view = parse_view(text).view
    facts = [{"text": f.text, "citations": list(f.citations)} for f in view.facts]
    shape = {"facts": facts, "reasoning": list(view.reasoning), "compliance_notes": list(view.compliance)}
    return orjson.dumps(shape).decode()


def _shared_chars(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _chat_cached_tokens(state: MessagesApiState, prompt: str) -> int:
    """Cached tokens as OpenAI documents them: the longest prefix shared with a recent request, from 1,024
    tokens on, in steps of 128. Tokens are 4 characters, as elsewhere in this fake."""
    now = time.monotonic()
    with state.lock:
        earlier = [p for p, until in state.chat_prompts if until > now]
        state.chat_prompts.append((prompt, now + state.cache_ttl_s))
    shared = max((_shared_chars(p, prompt) // 4 for p in earlier), default=0)
    return 0 if shared < 1024 else 1024 + (shared - 1024) // 128 * 128


def _route(state: MessagesApiState, answer: Callable[[MessagesApiState, dict[str, Any]], bytes]
           ) -> Callable[[dict[str, Any] | None], bytes]:  # fmt: skip
    """A POST route answering with `answer`, which sees the server's state (its prompt cache)."""

    def route(body: dict[str, Any] | None) -> bytes:
        assert body is not None
        return answer(state, body)

    return route


def _chat(state: MessagesApiState, body: dict[str, Any]) -> bytes:
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    request = ModelRequest(_purpose(system), system, user, body["max_tokens"], body["temperature"])
    text = ExtractiveBackend().answer(request)
    if body.get("response_format", {}).get("type") == "json_schema":
        text = _structured(request, text)
    return orjson.dumps(
        {
            "id": "chatcmpl-fake-0001",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": body["model"],
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": len(text) // 4,
                      "total_tokens": (len(user) + len(text)) // 4,
                      "prompt_tokens_details": {"cached_tokens": _chat_cached_tokens(state, user)}},
        }
    )  # fmt: skip


def _models(body: dict[str, Any] | None) -> bytes:
    del body
    model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "tests", "tags": ["sha256:00ff"]}
    return orjson.dumps({"object": "list", "data": [model]})


def _props(body: dict[str, Any] | None) -> bytes:
    """llama.cpp's /props: the server's settings, its context window among them."""
    del body
    return orjson.dumps({"default_generation_settings": {"n_ctx": PROPS_N_CTX}, "total_slots": 1})


_SERVICE_ROUTES = ("/models", "/props", "/tokenize", "/slots")


def _slots(state: MessagesApiState) -> Callable[[dict[str, Any] | None], bytes]:
    def slots(body: dict[str, Any] | None) -> bytes:
        del body
        with state.lock:
            return orjson.dumps([{"id": 0, "n_ctx": PROPS_N_CTX, "is_processing": state.busy > 0}])

    return slots


def _tokenize(body: dict[str, Any] | None) -> bytes:
    """llama.cpp's /tokenize, with a tokenizer denser than the 3-characters-per-token estimate: 2 per token."""
    content = str((body or {}).get("content", ""))
    return orjson.dumps({"tokens": list(range((len(content) + 1) // 2))})


_LOOKBACK_BLOCKS = 20  # the Messages API looks this many block boundaries back from a breakpoint


def _cache_usage(state: MessagesApiState, system: str, content: str | list[dict[str, Any]]) -> dict[str, int]:
    """Usage as the Messages API reports it with its prompt cache: tokens read from it, written to it, and the rest.

    A breakpoint's prefix (the system prompt and the blocks through it) is looked up at the
    breakpoint and at up to 20 block boundaries before it; the longest entry found is read, the
    rest up to the last breakpoint is written, one entry per breakpoint. A prefix under the
    minimum is neither read nor written. Tokens are 4 characters, as elsewhere in this fake.
    """
    texts = [content] if isinstance(content, str) else [b["text"] for b in content]
    marks = [] if isinstance(content, str) else [i for i, b in enumerate(content) if b.get("cache_control")]
    ends = [sum(len(t) for t in texts[: i + 1]) for i in range(len(texts))]
    user = "".join(texts)

    def key(end: int) -> str:
        return hashlib.sha256(f"{system}\x00{user[:end]}".encode()).hexdigest()

    now, hit, last = time.monotonic(), 0, 0
    with state.lock:
        for mark in marks:
            if ends[mark] // 4 < state.cache_min_tokens:
                continue
            last = ends[mark]
            for i in range(mark, max(-1, mark - _LOOKBACK_BLOCKS - 1), -1):
                if ends[i] > hit and state.cache.get(key(ends[i]), 0.0) > now:
                    hit = ends[i]
                    break
        for mark in marks:
            if ends[mark] // 4 >= state.cache_min_tokens:
                state.cache[key(ends[mark])] = now + state.cache_ttl_s
    if not last:
        return {"input_tokens": len(user) // 4}
    return {"input_tokens": (len(user) - last) // 4, "cache_creation_input_tokens": (last - hit) // 4,
            "cache_read_input_tokens": hit // 4}  # fmt: skip


def _message(state: MessagesApiState, body: dict[str, Any]) -> bytes:
    content = body["messages"][0]["content"]
    prompt = content if isinstance(content, str) else "".join(b["text"] for b in content)
    request = ModelRequest(_purpose(body["system"]), body["system"], prompt, body["max_tokens"], body["temperature"])
    text = ExtractiveBackend().answer(request)
    return orjson.dumps(
        {
            "id": "msg_fake_0001",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {**_cache_usage(state, body["system"], content), "output_tokens": len(text) // 4},
        }
    )


def _handler(state: MessagesApiState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._reply(None)

        def do_POST(self) -> None:
            self._reply(orjson.loads(self.rfile.read(int(self.headers["content-length"]))))

        def _reply(self, body: dict[str, Any] | None) -> None:
            with state.lock:
                headers = {k.lower(): v for k, v in self.headers.items()}
                state.requests.append({"path": self.path, "headers": headers, "body": body, "at": time.monotonic()})
                state.arrivals.append(time.monotonic())
                service = self.path.endswith(_SERVICE_ROUTES)  # the server's own endpoints take no scripted fault
                fault = state.faults.popleft() if state.faults and not service else Fault()
                state.busy += 0 if service else 1
            try:
                self._answer(body, fault)
            finally:
                with state.lock:
                    state.busy -= 0 if service else 1

        def _answer(self, body: dict[str, Any] | None, fault: Fault) -> None:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if self.path.endswith("/slots") and not state.one_slot:
                fault = Fault(404)  # only a one-slot server (llama.cpp) reports its slots
            routes = {"/models": _models, "/props": _props, "/tokenize": _tokenize, "/slots": _slots(state),
                      "/chat/completions": _route(state, _chat)}  # fmt: skip
            answer = routes.get(next((end for end in routes if self.path.endswith(end)), ""), _route(state, _message))
            payload = fault.body if fault.body is not None else (answer(body) if fault.status == 200 else b"{}")
            try:
                self.send_response(fault.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in fault.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler


def error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def chat_requests(state: MessagesApiState) -> list[dict[str, Any]]:
    """The Chat Completions requests received, in order (the /v1/models lookups left out)."""
    return [r for r in state.requests if r["path"].endswith("/chat/completions")]


@contextmanager
def messages_api() -> Iterator[tuple[str, MessagesApiState]]:
    """Serves the fake APIs on a free loopback port; yields its base URL and state.

    Messages API at `/v1/messages`; Chat Completions at `<base>/v1/chat/completions` (and `/v1/models`).
    """
    state = MessagesApiState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
