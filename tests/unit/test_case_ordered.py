"""The baseline's dispatcher: cases concurrently, each case in order, a bounded number pending."""

from __future__ import annotations

import asyncio
import functools

from pipeline.workers.baseline.dispatch import CaseOrdered, ordering_key


def test_ordering_key_is_the_case_of_events_and_triggers() -> None:
    assert ordering_key(b"bank/c-1/000007") == ordering_key(b"bank/c-1") == b"bank/c-1"
    assert ordering_key(None) == b""


def test_one_case_runs_in_order_and_cases_run_at_once() -> None:
    done: list[tuple[str, int]] = []
    running = peak = 0

    async def step(case: str, n: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02 if n % 2 else 0.005)  # uneven: a later record would overtake without ordering
        running -= 1
        done.append((case, n))

    async def main() -> None:
        cases = CaseOrdered(pending=6)
        for n in range(12):
            for case in ("a", "b", "c"):
                await cases.submit(case.encode(), functools.partial(step, case, n))
        await cases.drain()

    asyncio.run(main())
    for case in ("a", "b", "c"):
        assert [n for c, n in done if c == case] == list(range(12))
    assert peak == 3  # one per case at a time, the three cases together


def test_pending_work_is_bounded_and_a_failure_does_not_stop_its_case() -> None:
    started: list[int] = []
    finished = 0
    unfinished_after_submit: list[int] = []

    async def main() -> None:
        cases = CaseOrdered(pending=2)

        async def work(n: int) -> None:
            nonlocal finished
            started.append(n)
            await asyncio.sleep(0.01)
            finished += 1
            if n == 0:
                raise RuntimeError("the first one fails")

        for n in range(5):
            await cases.submit(b"only", functools.partial(work, n))
            unfinished_after_submit.append(n + 1 - finished)
        await cases.drain()

    asyncio.run(main())
    assert started == [0, 1, 2, 3, 4]
    assert max(unfinished_after_submit) == 2


def test_cancel_stops_the_work_in_flight() -> None:
    finished: list[int] = []

    async def slow(n: int) -> None:
        await asyncio.sleep(10)
        finished.append(n)

    async def main() -> None:
        cases = CaseOrdered(pending=4)
        for n in range(3):
            await cases.submit(f"c{n}".encode(), functools.partial(slow, n))
        cases.cancel()
        await cases.drain()

    asyncio.run(asyncio.wait_for(main(), timeout=5))
    assert finished == []
