"""What every key provider must do under the pipeline's key ring, checked the same way for each (a provider's own
tests hand in how to make it: a fresh instance stands for another process)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.core.events import CaseRef
from pipeline.keys.providers import KeyProvider
from pipeline.keys.ring import KeyRing
from pipeline.keys.store import CaseKeys, MemoryKeyTopic

TEXT, AAD = b"income 84,000", b"meta"


def sealed_here_opens_there(make: Callable[[], KeyProvider]) -> tuple[CaseKeys, MemoryKeyTopic, CaseRef]:
    """A case's key made by one process opens in another; the writer, the key topic and the case, for more checks."""
    topic = MemoryKeyTopic()
    writer = CaseKeys(KeyRing(make()), topic)
    case = CaseRef("bank-a", "c-7")
    sealed = writer.seal(case, TEXT, AAD)
    assert CaseKeys(KeyRing(make()), topic).open(case, sealed, AAD) == TEXT
    return writer, topic, case


def rotation_rewraps_and_erasure_after_it_opens_nothing(make: Callable[[], KeyProvider]) -> None:
    """`dpm keys rotate`'s work: keys wrapped again under v2, v1 retired at the next rotation; the tenant erased."""
    topic = MemoryKeyTopic()
    keys = CaseKeys(KeyRing(make()), topic)
    cases = [CaseRef("bank-a", f"c-{n}") for n in range(3)]
    sealed = [keys.seal(case, TEXT, AAD) for case in cases]
    rotation = keys.rotate("bank-a")
    assert (rotation.kek_id, rotation.rewrapped, rotation.retired) == ("v2", 3, ())
    assert keys.rotate("bank-a").retired == ("v1",)
    restarted = CaseKeys(KeyRing(make()), topic)
    assert all(restarted.open(c, s, AAD) == TEXT for c, s in zip(cases, sealed, strict=True))
    assert keys.erase_tenant("bank-a") == tuple(cases)
    after = CaseKeys(KeyRing(make()), topic)
    after.sync()
    assert all(after.erased(case) for case in cases)
    assert make().versions("bank-a") == []
