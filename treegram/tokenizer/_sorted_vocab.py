"""The kernel-facing sorted vocabulary: flat arrays of the tokens a grammar may produce.

Tokens are sorted by their decoded bytes (ties by token id), so every token that extends a
given token follows it in one contiguous run. Token classification walks the trie of this
order (``SortedVocab.trie``) and, when a prefix is rejected, skips every token that starts
with it in one step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..kernels import build_trie, subset_tokens

__all__ = ["SortedVocab", "build_sorted_vocab"]


@dataclass(frozen=True, eq=False)
class SortedVocab:
    """Grammar-producible tokens sorted by their bytes, as read-only flat arrays.

    Attributes
    ----------
    token_ids : numpy.ndarray
        int32 ``[n]``: the token id at each sorted position.
    offsets : numpy.ndarray
        int64 ``[n + 1]``: token ``i``'s bytes are ``data[offsets[i]:offsets[i + 1]]``.
    data : numpy.ndarray
        uint8: the concatenated bytes of all tokens in sorted order.
    lcp : numpy.ndarray
        int32 ``[n]``: length of the longest common prefix with the previous sorted token
        (0 for the first).
    trie : tuple of numpy.ndarray
        The token trie in preorder (``node_byte, node_depth, node_end, node_first,
        node_tok_lo, node_tok_hi``; see ``treegram.kernels._trie``).
    max_len : int
        Length in bytes of the longest token (0 when there are no tokens).
    by_length : numpy.ndarray
        int32 ``[n]``: the sorted positions from the longest token to the shortest (ties in
        sorted order). The mask kernel rechecks the tokens longer than a margin near a
        counted string's bound (``kernels._mask.recheck_long_tokens``): it reads them off
        the front of this list instead of scanning the whole vocabulary at every mask.
    """

    token_ids: np.ndarray
    offsets: np.ndarray
    data: np.ndarray
    lcp: np.ndarray
    trie: tuple
    max_len: int
    by_length: np.ndarray

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])

    def subset_trie(self, positions: np.ndarray) -> tuple:
        """The trie (as ``trie``) of the tokens at sorted ``positions`` (increasing); its
        token positions index ``positions``."""
        positions = np.asarray(positions, dtype=np.int64)
        # read-only like the whole vocabulary's arrays: one specialization of build_trie and
        # of every kernel that walks a trie
        subset = subset_tokens(self.offsets, self.data, self.lcp, positions)
        for array in subset:
            array.flags.writeable = False
        trie = build_trie(*subset)
        for array in trie:
            array.flags.writeable = False
        return trie

    def token_bytes(self, position: int) -> bytes:
        """Return the bytes of the token at sorted ``position``."""
        return self.data[self.offsets[position] : self.offsets[position + 1]].tobytes()


def build_sorted_vocab(decoded: Sequence[bytes], excluded_ids: Iterable[int]) -> SortedVocab:
    """Build the sorted vocabulary of the non-empty tokens not in ``excluded_ids``.

    Parameters
    ----------
    decoded : Sequence[bytes]
        Decoded bytes of every token id (``len(decoded)`` is the model's vocab size).
    excluded_ids : Iterable[int]
        Ids never produced by a grammar (special and padding tokens).

    Returns
    -------
    SortedVocab
        The frozen, read-only arrays.
    """
    lengths = np.fromiter(map(len, decoded), dtype=np.int64, count=len(decoded))
    keep = lengths > 0
    excluded = np.fromiter(excluded_ids, dtype=np.int64)
    keep[excluded] = False
    order = sorted(np.flatnonzero(keep).tolist(), key=decoded.__getitem__)
    token_ids = np.asarray(order, dtype=np.int32)
    sorted_lengths = lengths[token_ids]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(sorted_lengths, out=offsets[1:])
    data = np.frombuffer(b"".join([decoded[i] for i in order]), dtype=np.uint8)
    lcp = _adjacent_lcp(data, offsets, sorted_lengths)
    for array in (token_ids, offsets, data, lcp):  # before build_trie: one specialization
        array.flags.writeable = False
    trie = build_trie(offsets, data, lcp)
    max_len = int(sorted_lengths.max()) if len(order) else 0
    for array in trie:
        array.flags.writeable = False
    by_length = np.argsort(-sorted_lengths, kind="stable").astype(np.int32)
    by_length.flags.writeable = False
    return SortedVocab(token_ids, offsets, data, lcp, trie, max_len, by_length)


def _adjacent_lcp(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Longest common prefix of each sorted token with its predecessor (one pass per byte
    column, over the pairs still equal so far)."""
    n = lengths.shape[0]
    lcp = np.zeros(n, dtype=np.int32)
    if n < 2:
        return lcp
    prev_start, cur_start = offsets[:-2], offsets[1:-1]
    limit = np.minimum(lengths[:-1], lengths[1:])
    pair_lcp = lcp[1:]  # a view: pair k compares tokens k and k + 1
    active = np.flatnonzero(limit > 0)
    column = 0
    while active.size:
        active = active[data[prev_start[active] + column] == data[cur_start[active] + column]]
        column += 1
        pair_lcp[active] = column
        active = active[limit[active] > column]
    return lcp
