"""The API keys file changed by several processes at once: every change lands, none undoes another's."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path

from pipeline.services.api_keys import ApiKeys

_PROCESSES = 4  # of each kind: adders and removers
_EACH = 12  # changes per process


def _add_keys(path: Path, start: Barrier, made: Path) -> None:
    store = ApiKeys(path)
    start.wait()
    ids = [store.add("acme")[0].key_id for _ in range(_EACH)]
    made.write_text("\n".join(ids))


def _remove_keys(path: Path, start: Barrier, ids: list[str]) -> None:
    store = ApiKeys(path)
    start.wait()
    for key_id in ids:
        store.remove(key_id=key_id)


def test_keys_added_and_removed_by_concurrent_processes_are_all_applied(tmp_path: Path) -> None:
    store = ApiKeys(tmp_path / "api-keys.json")
    before = [store.add("globex")[0].key_id for _ in range(_PROCESSES * _EACH)]
    # Processes, not threads: the lock is between processes. Spawned, not forked: a fork of a test process
    # running threads (librdkafka's, pytest-xdist's) can crash in the child.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2 * _PROCESSES)
    made = [tmp_path / f"made-{n}" for n in range(_PROCESSES)]
    workers = [context.Process(target=_add_keys, args=(store.path, start, made[n])) for n in range(_PROCESSES)]
    workers += [context.Process(target=_remove_keys, args=(store.path, start, before[n * _EACH:(n + 1) * _EACH]))
                for n in range(_PROCESSES)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * len(workers)
    added = {key_id for path in made for key_id in path.read_text().split()}
    assert len(added) == _PROCESSES * _EACH
    assert {k.key_id for k in ApiKeys(store.path).listed()} == added  # no removed key back, no added key lost


def test_a_change_waits_for_the_lock_another_process_holds(tmp_path: Path) -> None:
    store = ApiKeys(tmp_path / "api-keys.json")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    adder = context.Process(target=_add_keys, args=(store.path, start, tmp_path / "made"))
    adder.start()
    with store._changing():  # what a concurrent `dpm api keys add` holds while it reads and writes
        start.wait()
        adder.join(1.0)
        assert adder.is_alive()  # blocked on the lock
        assert not store.path.exists()
    adder.join(30)
    assert adder.exitcode == 0
    assert len(ApiKeys(store.path).listed()) == _EACH
