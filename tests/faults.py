"""Runs `dpm` with a crash injected at a named point, to test what a SIGKILL there leaves behind.

    python -m tests.faults POINT:N dpm-args...

Points (N: the Nth time the point is reached):
  after-commit   the baseline just committed a trigger's outputs and ledger record, before faust
                 acknowledges the trigger or the decided table hears of it
  before-commit  the baseline's transaction holds a trigger's outputs and ledger record, not committed
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from pipeline.cli import main as dpm
from pipeline.core.events import LogPosition
from pipeline.kafka.processing.once import OncePublisher
from pipeline.kafka.writing.txn_producer import TransactionalProducer

_reached = 0


def _count(nth: int) -> None:
    global _reached  # noqa: PLW0603 - one counter per process
    _reached += 1
    if _reached == nth:
        os.kill(os.getpid(), signal.SIGKILL)


def _after_commit(nth: int) -> None:
    publish = OncePublisher.publish

    def publish_then_die(self: OncePublisher, topic: str, position: LogPosition, outputs: Any) -> bool:
        published = publish(self, topic, position, outputs)
        if published and topic.endswith(".triggers"):
            _count(nth)
        return published

    OncePublisher.publish = publish_then_die  # type: ignore[method-assign]


def _before_commit(nth: int) -> None:
    call = TransactionalProducer._call

    def die_before_commit(
        self: TransactionalProducer, what: str, work: Callable[[], Any], timeout_s: float | None = None
    ) -> Any:
        if what == "commit_transaction":
            _count(nth)
        return call(self, what, work, timeout_s)

    TransactionalProducer._call = die_before_commit  # type: ignore[method-assign]


POINTS = {"after-commit": _after_commit, "before-commit": _before_commit}

if __name__ == "__main__":
    point, _, nth = sys.argv[1].partition(":")
    POINTS[point](int(nth))
    sys.argv = ["dpm", *sys.argv[2:]]
    dpm()
