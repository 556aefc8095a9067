"""By-id flat byte table of a vocabulary, used by ``accept_token``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TokenTable", "build_token_table"]


@dataclass(frozen=True)
class TokenTable:
    """Token ``t`` reads ``data[offsets[t]:offsets[t + 1]]``.

    Excluded ids (special and padding tokens) have no bytes: the grammar never produces
    them, exactly as in the sorted vocabulary. Stop tokens keep their text; a matcher treats
    the ids in its own stop set as stops before looking at their bytes.

    Attributes
    ----------
    offsets : int64 [vocab_size + 1]
    data : uint8 [total_bytes]
    """

    offsets: np.ndarray
    data: np.ndarray


def build_token_table(decoded: tuple[bytes, ...], excluded) -> TokenTable:
    """Build the table for ``decoded`` (bytes per id), blanking the ``excluded`` ids."""
    skip = set(int(t) for t in excluded)
    pieces = [b"" if i in skip else tok for i, tok in enumerate(decoded)]
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(pieces), dtype=np.uint8).copy()
    return TokenTable(offsets=offsets, data=data)
