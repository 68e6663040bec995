"""AES-256-GCM under a data key: what seals one record's content, bound to its clear metadata."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.core.errors import DpmError

ALGORITHM = "A256GCM"
_NONCE_BYTES = 12  # the GCM standard size; random per record, so a data key may seal ~2^32 records safely


class TamperedError(DpmError):
    """Ciphertext that does not authenticate: altered bytes or metadata, or the wrong key."""


@dataclass(frozen=True, repr=False)
class DataKey:
    """One case's data key: `kid` names it in every sealed record; `secret` never leaves memory in clear."""

    kid: str
    secret: bytes

    @classmethod
    def generate(cls) -> DataKey:
        return cls(base64.urlsafe_b64encode(os.urandom(12)).decode("ascii"), AESGCM.generate_key(bit_length=256))

    def seal(self, plaintext: bytes, aad: bytes) -> dict[str, str]:
        """The sealed form: key id, algorithm, nonce and ciphertext (with its tag), base64."""
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = AESGCM(self.secret).encrypt(nonce, plaintext, aad)
        return {"kid": self.kid, "alg": ALGORITHM, "nonce": _b64(nonce), "ct": _b64(ciphertext)}

    def open(self, sealed: Mapping[str, str], aad: bytes) -> bytes:
        """The plaintext of `sealed`; raises TamperedError unless it authenticates under this key and `aad`."""
        try:
            return AESGCM(self.secret).decrypt(base64.b64decode(sealed["nonce"]), base64.b64decode(sealed["ct"]), aad)
        except (InvalidTag, KeyError, ValueError) as exc:
            raise TamperedError(f"sealed content under key {self.kid} does not authenticate") from exc

    def __repr__(self) -> str:
        return f"DataKey(kid={self.kid!r})"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
