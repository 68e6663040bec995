"""The shared request producer on librdkafka's own mock cluster (no broker): reports complete futures, and a
caller that gives up on its request never stops the reports of the requests after it."""

from __future__ import annotations

from concurrent.futures import Future

from pipeline.core.events import LogPosition
from pipeline.kafka.processing.steps import Output
from pipeline.kafka.writing.trigger_sender import TriggerSender

MOCK = {"bootstrap.servers": "", "test.mock.num.brokers": "1"}  # librdkafka's in-process mock cluster


def _output(n: int) -> Output:
    return Output("triggers", f"acme/case-{n}".encode(), b"{}", (("dpm_test", b"1"),), 0)


def test_each_request_s_future_completes_with_where_it_was_written() -> None:
    sender = TriggerSender(MOCK)
    try:
        positions = [sender.send(_output(n)).result(30) for n in range(3)]
    finally:
        sender.close()
    assert positions == [LogPosition(0, 0), LogPosition(0, 1), LogPosition(0, 2)]


def test_a_request_given_up_on_does_not_stop_the_reports_of_later_ones() -> None:
    sender = TriggerSender(MOCK)
    try:
        abandoned: Future[LogPosition] = sender.send(_output(1))
        abandoned.cancel()  # what a caller's timeout did before its future was shielded
        later = sender.send(_output(2)).result(30)
    finally:
        sender.close()
    assert later.partition == 0
