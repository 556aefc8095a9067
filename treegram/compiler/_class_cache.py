"""Token classes shared by every grammar compiled for one vocabulary.

Classifying a state costs one walk of the token trie; a state inside an unconstrained
string or a long length-bounded string accepts most of the vocabulary, and its walk visits
every trie node (milliseconds on a 128k vocabulary). Such states recur in almost every JSON
Schema, so the classes are kept per vocabulary under the state's classification signature
(``kernels._signature``): the first grammar that meets a string body pays the walk, every
later state with the same signature, in that grammar or another, reuses the class.

It also holds the vocabulary's slices (``kernels._slices``): the JSON string slice's token
set, as sorted positions and as a token bitset, and the trie of the tokens outside it.

The cache is bounded (least recently used entries are dropped past ``max_bytes``) and
thread-safe.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..kernels import (
    group_trie,
    json_string_slice_dfa,
    positions_to_bitset,
    restricted_slice_dfa,
    slice_members,
    subtree_max_leads,
    subtree_suffix_bits,
    subtree_text_summary,
)


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only. Arrays passed to kernels beside the per-vocabulary ones
    are read-only like them: numba compiles a kernel once per combination of read-only and
    writable arguments, so mixing the two compiles (and caches) every kernel twice."""
    array.flags.writeable = False
    return array


NO_BASE = read_only(np.zeros(0, dtype=np.int32))  # positions_to_bitset: no base bitset

__all__ = ["ClassCache", "NO_BASE", "StringSlice", "class_cache_for", "read_only"]

DEFAULT_MAX_BYTES = 128 << 20
# A signature window larger than this many states is not worth hashing: such states (deep
# inside big literal-heavy rules) reject most first bytes and classify quickly anyway. The
# 128-byte window of a long bounded string (its characters in 64-copy blocks, the block
# rules' returns in the context) holds up to about 4,000: hashed, its positions share classes
# (a minLength 50, maxLength 32767 string: 107 of 182 expensive states had no signature
# at 1,024; mask time of 350 held-out MaskBench schemas 14% lower, slow masks 30%).
SIGNATURE_CAP = 4096
# Restricted slice DFAs a vocabulary keeps (a few KB each: the excluded sets come from the
# states' character classes, a handful per grammar, mostly the same ones).
_RESTRICTED_DFAS = 256
# Grouped tries a vocabulary keeps (``kernels._slice_groups``; up to 2.5 MB each, most of
# it a node per token): a long bounded string's byte groups are the same in every schema,
# a pattern's are its grammar's own. A build costs about one slice walk of the whole trie.
_GROUPED_TRIES = 8
# Byte groupings noted as worth a grouped trie (see grouped_trie), the oldest forgotten first.
_GROUPINGS_NOTED = 1024


class StringSlice:
    """The JSON string slice of one vocabulary (see ``kernels._slices``), limited to tokens
    of at most ``max_bytes`` bytes (a state inside a string with few characters left
    contains a limited slice, not the whole one).

    Attributes
    ----------
    max_bytes : int
        Length limit of the slice's tokens.
    leads : int32 [n_tokens]
        Characters of each sorted token in the (unlimited) slice, -1 outside it.
    dfa : int16 [n_q, 256]
        The slice DFA.
    n_members : int
        Number of tokens in the slice.
    bitset : int32 [n_words]
        The slice's tokens as a token-id bitset.
    outside : int32 [n_outside]
        Sorted positions of the tokens outside the slice, increasing.
    outside_trie : tuple
        The trie of those tokens; its positions index ``outside``.
    """

    def __init__(
        self, sorted_vocab, n_words: int, max_bytes: int, leads: np.ndarray | None = None
    ) -> None:
        self.max_bytes = max_bytes
        self.dfa = json_string_slice_dfa()
        self._token_ids = sorted_vocab.token_ids
        self._n_words = n_words
        if leads is None:  # the same for every length limit: callers may pass it on
            leads = slice_members(self.dfa, sorted_vocab.offsets, sorted_vocab.data)
        self.leads = leads
        member = (self.leads >= 0) & (np.diff(sorted_vocab.offsets) <= max_bytes)
        self.n_members = int(np.count_nonzero(member))
        self.bitset = positions_to_bitset(
            sorted_vocab.token_ids,
            np.flatnonzero(member).astype(np.int32),
            n_words,
            NO_BASE,
        )
        self.outside = np.flatnonzero(~member).astype(np.int32)
        self.outside_trie = sorted_vocab.subset_trie(self.outside)
        for array in (self.dfa, self.leads, self.bitset, self.outside, *self.outside_trie):
            array.flags.writeable = False
        self._upto: dict[int, tuple[np.ndarray, int]] = {}
        # (positions of the slice's tokens by increasing characters, their characters):
        # see _build_upto. The whole slice, the one states ask limits of, sorts them now
        # (a fraction of a millisecond beside the tens its build takes, where the first
        # limit's build would have doubled); others on their first build, under
        # _upto_lock (which serialises builds; lookups take no lock).
        whole = max_bytes >= sorted_vocab.max_len
        self._by_chars: tuple | None = self._chars_order() if whole else None
        self._upto_lock = threading.Lock()
        self._restricted: dict[bytes, np.ndarray] = {}

    def bitset_upto(self, n_chars: int) -> tuple[np.ndarray, int]:
        """(token bitset, count) of the slice's tokens of at most ``n_chars`` characters
        (whatever ``max_bytes``), built on first use."""
        found = self._upto.get(n_chars)
        if found is None:
            with self._upto_lock:
                found = self._upto.get(n_chars)
                if found is None:
                    found = self._upto[n_chars] = self._build_upto(n_chars)
        return found

    def _chars_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(int32 positions of the slice's tokens by increasing characters, increasing
        position among equal ones; their characters)."""
        # (a stable sort of small unsigned keys, one byte each for vocabularies of tokens
        # under 255 characters: a radix sort)
        key = self.leads + 1
        key = key.astype(np.min_scalar_type(int(key.max(initial=0))))
        order = np.argsort(key, kind="stable")
        outside = int(np.count_nonzero(self.leads < 0))  # sorted first: skip them
        order = order[outside:].astype(np.int32)
        return order, self.leads[order]

    def _build_upto(self, n_chars: int) -> tuple[np.ndarray, int]:
        """:meth:`bitset_upto` of a limit not built yet (``_upto_lock`` held): the bitset
        of the largest limit built below it with the tokens of the characters in between
        added. Each limit a state's slice check finds took a scan of the vocabulary and a
        bitset of up to 110,000 tokens (0.15 to 0.35 ms, in slow first masks of held-out
        MaskBench); from the one below, a copy and a few bits."""
        if self._by_chars is None:
            self._by_chars = self._chars_order()
        order, chars = self._by_chars
        below = max((n for n in self._upto if n < n_chars), default=None)
        if below is None:
            base, count, start = NO_BASE, 0, 0
        else:
            base, count = self._upto[below]
            start = int(np.searchsorted(chars, below, side="right"))
        stop = int(np.searchsorted(chars, n_chars, side="right"))
        bitset = positions_to_bitset(self._token_ids, order[start:stop], self._n_words, base)
        bitset.flags.writeable = False
        return bitset, count + stop - start

    def restricted_dfa(self, excluded: np.ndarray) -> np.ndarray:
        """``kernels.restricted_slice_dfa`` of the slice without the lead bytes ``excluded``
        (uint64 [4]), read-only. Kept for the vocabulary (at most
        :data:`_RESTRICTED_DFAS`): a counted loop's state tries up to three excluded sets,
        the same ones in every grammar, and each build costs about 0.4 ms (a tool-call
        tag's first mask built three, 1.3 of its 3.5 ms)."""
        key = excluded.tobytes()
        found = self._restricted.get(key)
        if found is None:
            found = read_only(restricted_slice_dfa(self.dfa, excluded))
            if len(self._restricted) < _RESTRICTED_DFAS:  # one store: safe across threads
                self._restricted[key] = found
        return found


class ClassCache:
    """Signature -> encoded token class, for one vocabulary.

    Parameters
    ----------
    sorted_vocab : SortedVocab
        The vocabulary (held by a weak reference).
    max_bytes : int
        Bound on the bytes held by the cached token sets.

    Attributes
    ----------
    key0, key1 : numpy.uint64
        Random keys of the signature hash (per process and vocabulary).
    hits, misses : int
        Lookups served from the cache and lookups that were not.
    """

    def __init__(self, sorted_vocab, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._sorted_vocab = weakref.ref(sorted_vocab)
        self._slices: dict[tuple[int, int], StringSlice] = {}
        self._summary: tuple[np.ndarray, np.ndarray] | None = None
        self._no_leads: np.ndarray | None = None
        self._suffix_bits: np.ndarray | None = None
        words = np.frombuffer(os.urandom(16), dtype=np.uint64)
        self.key0 = np.uint64(words[0])
        self.key1 = np.uint64(words[1])
        self.max_bytes = int(max_bytes)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, int], tuple] = OrderedDict()
        self._bytes = 0
        self._grouped: OrderedDict[bytes, tuple] = OrderedDict()  # see grouped_trie
        self._groupings_noted: OrderedDict[bytes, None] = OrderedDict()
        # grouped_trie's scratch (about 10 MB: fresh pages each build cost a few ms), made on
        # first need and used under its own lock
        self._group_scratch: tuple | None = None
        self._group_lock = threading.Lock()

    def get(self, signature: tuple[int, int]) -> tuple | None:
        """The ``(digest, kind, payload, uncertain)`` stored under ``signature``, or None."""
        with self._lock:
            entry = self._entries.get(signature)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(signature)
            self.hits += 1
            return entry

    def put(self, signature: tuple[int, int], entry: tuple) -> None:
        """Store ``entry = (digest, kind, payload, uncertain)`` under ``signature``."""
        size = 64 + entry[2].nbytes + entry[3].nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if signature in self._entries:
                return
            self._entries[signature] = entry
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= 64 + old[2].nbytes + old[3].nbytes

    def string_slice(self, n_words: int, max_bytes: int) -> StringSlice:
        """The JSON string slice of tokens of at most ``max_bytes`` bytes, for bitsets of
        ``n_words`` words (built on first use; the whole slice with the trie's
        :meth:`text_summary` and :meth:`suffix_bits`, all a first string's cost)."""
        key = (n_words, max_bytes)
        found = self._slices.get(key)
        if found is None:
            created = False
            with self._lock:
                found = self._slices.get(key)
                if found is None:
                    known = next(iter(self._slices.values()), None)
                    found = StringSlice(
                        self._sorted_vocab(),
                        n_words,
                        max_bytes,
                        None if known is None else known.leads,
                    )
                    self._slices[key] = found
                    created = True
            if created and max_bytes == self._sorted_vocab().max_len:
                self.text_summary(n_words)
                self.suffix_bits()
        return found

    def text_summary(self, n_words: int) -> tuple[np.ndarray, np.ndarray]:
        """``kernels.subtree_text_summary`` of the vocabulary's trie: the characters below
        each node and their longest slice text (built on first use)."""
        found = self._summary
        if found is None:
            leads = self.string_slice(n_words, self._sorted_vocab().max_len).leads
            with self._lock:
                found = self._summary
                if found is None:
                    sv = self._sorted_vocab()
                    found = (
                        subtree_text_summary(
                            sv.offsets, sv.data, sv.trie[2], sv.trie[4], sv.trie[5]
                        ),
                        subtree_max_leads(leads, sv.trie[2], sv.trie[4], sv.trie[5]),
                    )
                    for array in found:
                        array.flags.writeable = False
                    self._summary = found
        return found

    def note_grouping(self, group: np.ndarray) -> None:
        """Note that a slice walk of the byte grouping ``group`` read much of the trie: its
        next request builds the grouped trie (:meth:`grouped_trie`)."""
        with self._lock:
            self._groupings_noted[group.tobytes()] = None
            if len(self._groupings_noted) > _GROUPINGS_NOTED:
                self._groupings_noted.popitem(last=False)

    def grouped_trie(self, group: np.ndarray, n_groups: int, build: bool = True) -> tuple | None:
        """The trie of the slice tokens' strings of byte groups (``kernels.group_trie``):
        read-only (parent, group, depth, subtree end, token's node) arrays; None for a
        grouping not noted yet (:meth:`note_grouping`: a build costs about one walk of the
        whole trie, which a cheap walk, or one walk alone, would not win back), and without
        ``build`` for one not built yet. ``group`` (int32 [256]) is each byte's group as
        ``kernels.slice_byte_groups`` numbers them (``n_groups`` of them)."""
        key = group.tobytes()
        with self._lock:
            if key in self._grouped:
                self._grouped.move_to_end(key)
                return self._grouped[key]
            if key not in self._groupings_noted or not build:
                return None
        sv = self._sorted_vocab()
        token_node = np.empty(len(sv), dtype=np.int32)
        with self._group_lock:
            if self._group_scratch is None:
                n = sv.trie[0].shape[0] + 1
                self._group_scratch = (
                    np.empty((4, n), dtype=np.int32),
                    np.empty((5, n), dtype=np.int32),
                )
            out, scratch = self._group_scratch
            m = group_trie(
                sv.trie,
                group,
                n_groups,
                out,
                scratch,
                token_node,
                np.empty((2, sv.max_len + 2), dtype=np.int32),
                np.empty((2, (sv.max_len + 1) * n_groups), dtype=np.int32),
            )
            found = (*(read_only(x[:m].copy()) for x in out), read_only(token_node))
        with self._lock:  # (a thread that built the same meanwhile: either copy is right)
            self._grouped[key] = found
            while len(self._grouped) > _GROUPED_TRIES:
                self._grouped.popitem(last=False)
        return found

    def suffix_bits(self) -> np.ndarray:
        """``kernels.subtree_suffix_bits`` of the vocabulary's trie (built on first use)."""
        found = self._suffix_bits
        if found is None:
            sv = self._sorted_vocab()
            found = subtree_suffix_bits(sv.trie[0], sv.trie[2])
            found.flags.writeable = False
            self._suffix_bits = found
        return found

    def loop_summary(self, n_words: int) -> tuple[np.ndarray, np.ndarray]:
        """(bytes below each trie node, zeros): :meth:`text_summary` for a walk that
        accepts subtrees by their bytes alone (a state's byte loop, no length bound)."""
        bits = self.text_summary(n_words)[0]
        found = self._no_leads
        if found is None:
            found = np.zeros(bits.shape[0], dtype=np.int32)
            found.flags.writeable = False
            self._no_leads = found
        return bits, found

    @property
    def size_bytes(self) -> int:
        """Bytes held by the cached token sets."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def class_cache_for(sorted_vocab) -> ClassCache:
    """The process-wide class cache of one sorted vocabulary (created on first use)."""
    with _CACHES_LOCK:
        cache = _CACHES.get(sorted_vocab)
        if cache is None:
            cache = _CACHES[sorted_vocab] = ClassCache(sorted_vocab)
        return cache
