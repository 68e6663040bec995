"""A local HTTP server that speaks the Anthropic Messages API, for testing the real SDK path.

By default it answers like a model would, by running the offline extractive algorithm on the
request; a test can queue faults first (status codes with headers, delays, malformed bodies).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from pipeline.core.model import ModelRequest, Purpose
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


def _purpose(system: str) -> Purpose:
    if system.startswith("You decide"):
        return Purpose.DECIDE
    if system.startswith("You maintain"):
        return Purpose.SUMMARIZE
    return Purpose.PROJECT


def _answer(body: dict[str, Any]) -> bytes:
    request = ModelRequest(
        _purpose(body["system"]),
        body["system"],
        body["messages"][0]["content"],
        body["max_tokens"],
        body["temperature"],
    )
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
            "usage": {"input_tokens": len(body["messages"][0]["content"]) // 4, "output_tokens": len(text) // 4},
        }
    )


def _handler(state: MessagesApiState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = orjson.loads(self.rfile.read(int(self.headers["content-length"])))
            with state.lock:
                state.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                state.arrivals.append(time.monotonic())
                fault = state.faults.popleft() if state.faults else Fault()
            if fault.delay_s:
                time.sleep(fault.delay_s)
            payload = fault.body if fault.body is not None else (_answer(body) if fault.status == 200 else b"{}")
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


@contextmanager
def messages_api() -> Iterator[tuple[str, MessagesApiState]]:
    """Serves the fake Messages API on a free loopback port; yields its base URL and state."""
    state = MessagesApiState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
