"""Call timeouts that follow a request's size and the server's measured speed, and no call sent behind an abandoned one.

A local server on two cores reads a few hundred prompt tokens a second and writes a few tokens a
second: one constant timeout is either far too long for a short call or too short for a long
prompt. So each call's timeout is what the server's measured speeds (llama.cpp reports them with
every answer, `timings`) say the request needs, with a safety factor, never below the configured
timeout. A server answering one request at a time (llama.cpp, one slot) keeps working on a request
its client gave up on: a retry sent at once waits behind it and times out in turn. So after a
timeout, the next request waits until the server's slots are idle (`/slots`).
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import orjson

_LOG = logging.getLogger("pipeline.llm.pacing")
_SAFETY = 2.0  # the timeout is this many times the expected duration
_OVERHEAD_S = 5.0
_IDLE_POLL_S = 0.5


@dataclass
class Speeds:
    """A server's measured prompt reading and answer writing speeds, tokens per second (None: not measured)."""

    prompt_per_s: float | None = None
    predicted_per_s: float | None = None

    def observe(self, raw: bytes) -> None:
        """Takes the speeds a llama.cpp answer reports (`timings`); other answers leave them as they were."""
        try:
            timings = orjson.loads(raw).get("timings") or {}
            prompt, predicted = float(timings["prompt_per_second"]), float(timings["predicted_per_second"])
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            return
        if prompt > 0:
            self.prompt_per_s = prompt
        if predicted > 0:
            self.predicted_per_s = predicted

    def expected_s(self, prompt_tokens: int, max_tokens: int) -> float | None:
        """How long a request should take at the measured speeds (its answer as long as allowed)."""
        if self.prompt_per_s is None or self.predicted_per_s is None:
            return None
        return prompt_tokens / self.prompt_per_s + max_tokens / self.predicted_per_s


class Pacing:
    """One server's speeds, timeouts and idle wait; thread-safe enough for the calls a worker makes."""

    def __init__(self, root_url: str, floor_s: float) -> None:
        self._slots_url = f"{root_url.rstrip('/')}/slots"
        self._floor_s = floor_s
        self.speeds = Speeds()
        self._has_slots: bool | None = None  # unknown until asked
        # How much longer than the speeds say calls have turned out to take (long prompts read slower
        # than the short measuring call did): learnt from calls that timed out.
        self._slowdown = 1.0

    def expected_s(self, prompt_tokens: int, max_tokens: int) -> float | None:
        """How long a request should take, as the speeds and what timed-out calls taught say."""
        expected = self.speeds.expected_s(prompt_tokens, max_tokens)
        return None if expected is None else expected * self._slowdown

    def timeout_for(self, prompt_tokens: int, max_tokens: int) -> float:
        """The configured timeout, or more where the measured speeds say the request needs more."""
        expected = self.expected_s(prompt_tokens, max_tokens)
        return self._floor_s if expected is None else max(self._floor_s, _SAFETY * expected + _OVERHEAD_S)

    def learn(self, expected_s: float, took_s: float) -> None:
        """A call expected to take `expected_s` took at least `took_s`: later timeouts allow for it."""
        if expected_s > 0:
            self._slowdown = max(self._slowdown, took_s / expected_s)

    def serves_one_at_a_time(self) -> bool:
        """Whether the server reports its slots (llama.cpp): it is then worth measuring and waiting for."""
        if self._has_slots is None:
            self._has_slots = self._busy() is not None
        return self._has_slots

    def wait_out_abandoned(self, limit_s: float) -> float:
        """A call timed out: waits (up to `limit_s`) until the server has stopped working on it; returns the wait."""
        if not self.serves_one_at_a_time():
            return 0.0
        started = time.monotonic()
        while time.monotonic() - started < limit_s and self._busy():
            time.sleep(_IDLE_POLL_S)
        waited = time.monotonic() - started
        _LOG.warning("a model call timed out; the server finished it %.1f s later, and only then is it sent again",
                     waited)  # fmt: skip
        return waited

    def _busy(self) -> bool | None:
        """Whether some slot is processing; None when the server does not report slots."""
        try:
            with urllib.request.urlopen(self._slots_url, timeout=5) as answer:  # noqa: S310 - the configured server
                slots = orjson.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
        if not isinstance(slots, list):
            return None
        return any(isinstance(slot, dict) and slot.get("is_processing") for slot in slots)


def retry_timeout(timed_out_after_s: float, finished_after_s: float) -> float:
    """The timeout for a call sent again: the abandoned one took at least its timeout plus the wait for it, so more."""
    return max(2 * timed_out_after_s, _SAFETY * (timed_out_after_s + finished_after_s) + _OVERHEAD_S)
