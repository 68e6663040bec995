"""Idempotency keys (core/idempotency.py) and the client's keys in flight, without a broker."""

from __future__ import annotations

import threading

import pytest

from pipeline.client import IdempotencyKeyInFlightError
from pipeline.client.memory import InFlight
from pipeline.core.domains import domain_task
from pipeline.core.events import CaseRef
from pipeline.core.idempotency import (
    InvalidIdempotencyKeyError,
    append_fingerprint,
    check_idempotency_key,
    decision_fingerprint,
    header_key,
)


@pytest.mark.parametrize("key", ["a", "x" * 200, "8e03978e-40d5-43e8-bc93-6894a57f9324", "!~{}"])
def test_a_key_of_1_to_200_visible_ascii_characters_is_taken(key: str) -> None:
    assert check_idempotency_key(key) == key


@pytest.mark.parametrize("key", ["", " ", "a b", "x" * 201, "caf\u00e9", "new\nline", "nul\x00"])
def test_any_other_key_is_refused_without_naming_it(key: str) -> None:
    with pytest.raises(InvalidIdempotencyKeyError) as refused:
        check_idempotency_key(key)
    assert key.strip() == "" or key not in str(refused.value)


@pytest.mark.parametrize(("header", "key"), [("abc", "abc"), ('"abc"', "abc"), ('"a\\"b"', 'a"b'),
                                             ('"a\\\\b"', "a\\b")])  # fmt: skip
def test_the_header_names_its_key_as_the_drafts_quoted_string_or_bare(header: str, key: str) -> None:
    assert header_key(header) == key


@pytest.mark.parametrize("header", ['""', '"a"b"', '"x', '"a b"', '"a\\b"'])
def test_a_header_that_is_no_valid_key_is_refused(header: str) -> None:
    with pytest.raises(InvalidIdempotencyKeyError):
        header_key(header)


def test_fingerprints_tell_requests_apart_by_everything_they_ask() -> None:
    assert append_fingerprint([("tool", "a")]) == append_fingerprint([("tool", "a")])
    appends = ([("tool", "a")], [("tool", "b")], [("note", "a")], [("tool", "a"), ("tool", "a")], [("toola", "")])
    assert len({append_fingerprint(items) for items in appends}) == len(appends)
    loan, claim = domain_task("loan"), domain_task("claim")
    decisions = ((loan, 2000, ["dpm"]), (claim, 2000, ["dpm"]), (loan, 3000, ["dpm"]), (loan, 2000, ["summ"]))
    assert len({decision_fingerprint(task, budget, archs) for task, budget, archs in decisions}) == len(decisions)


def test_a_keyed_request_in_flight_refuses_the_same_key_and_frees_it_when_done() -> None:
    in_flight, case = InFlight(), CaseRef("acme", "case-1")
    with in_flight.hold(("append", case, "k")):
        with pytest.raises(IdempotencyKeyInFlightError), in_flight.hold(("append", case, "k")):
            pass
        with in_flight.hold(("decision", case, "k")), in_flight.hold(("append", CaseRef("acme", "case-2"), "k")):
            pass  # another kind of request, or another case: another key
    with in_flight.hold(("append", case, "k")):
        pass


def test_unkeyed_requests_are_never_in_flight_to_each_other() -> None:
    in_flight, case, entered = InFlight(), CaseRef("acme", "case-1"), threading.Barrier(2, timeout=5)

    def write() -> None:
        with in_flight.hold(("append", case, None)):
            entered.wait()

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not entered.broken
