"""An erasure's steps, without a broker: each safe to repeat, a failed one naming what is done and what is left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.config.settings import Settings
from pipeline.core.events import CaseRef
from pipeline.kafka.errors import NotAuthorizedError
from pipeline.services import erase

CASE = CaseRef("acme", "c-1")


class _Log:
    """What the erasure's steps find: live records each step destroys once, and a step that fails until fixed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, key: int, retired: int, events: int, views: int) -> None:
        self.live = {"key": key, "retired": retired, "events": events, "views": views}
        self.refused: str | None = None
        for name, part in (("_destroy_key", "key"), ("_destroy_keks", "key"), ("_destroy_retired_keys", "retired"),
                           ("_tombstone_events", "events"), ("_tombstone_segment_views", "views")):  # fmt: skip
            monkeypatch.setattr(erase, name, self._step(part))
        monkeypatch.setattr(erase, "_mark_indexed", lambda _settings, _subject: 0)  # this host's lookup index

    def _step(self, part: str) -> Callable[[Settings, object], int]:
        def run(_settings: Settings, _subject: object) -> int:
            if part == self.refused:
                raise NotAuthorizedError(f"not authorized to use topic dpm.{part}")
            found, self.live[part] = self.live[part], 0
            return found

        return run


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"DPM_HOME": str(tmp_path)})


def test_a_case_never_written_or_erased_already_is_erased_doing_nothing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Log(monkeypatch, key=0, retired=0, events=0, views=0)
    assert erase.erase_case(settings, CASE) == erase.Erasure(CASE.key, 0, 0, 0)
    assert erase.erase_tenant(settings, "acme") == erase.Erasure("acme", 0, 0, 0)


def test_a_failed_step_says_what_is_done_and_left_and_running_it_again_finishes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _Log(monkeypatch, key=1, retired=0, events=4, views=2)
    log.refused = "views"  # the door's principal without a grant on the segments topic
    with pytest.raises(erase.ErasureIncompleteError) as stopped:
        erase.erase_case(settings, CASE)
    said = str(stopped.value)
    assert "the data key is destroyed" in said
    assert "the events are tombstoned" in said
    assert "the segment views are not yet tombstoned" in said
    assert "run the same erasure again" in said
    assert "not authorized to use topic dpm.views" in said  # the cause
    assert CASE.case_id not in said  # an erased subject's id is not logged
    assert log.live == {"key": 0, "retired": 0, "events": 0, "views": 2}

    log.refused = None
    assert erase.erase_case(settings, CASE) == erase.Erasure(CASE.key, 0, 0, 2)  # only what was left
    assert erase.erase_case(settings, CASE) == erase.Erasure(CASE.key, 0, 0, 0)


def test_a_first_step_that_fails_says_nothing_is_erased_yet(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _Log(monkeypatch, key=1, retired=0, events=1, views=0)
    log.refused = "key"
    with pytest.raises(erase.ErasureIncompleteError, match="nothing is erased yet; the tenant's keys are not yet"):
        erase.erase_tenant(settings, "acme")
    assert log.live["events"] == 1  # no event tombstoned while its key could still open it
