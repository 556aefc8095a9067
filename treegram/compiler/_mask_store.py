"""Lazily built, de-duplicated token classification of one compiled grammar.

A state is classified the first time a matcher reaches it (the compile itself does not
walk the vocabulary), and identical classifications are stored once. Readers take a
:meth:`MaskStore.snapshot` (a tuple of arrays) without locking; writers append under a
lock into spare capacity and publish a state's class id last, so a reader either sees the
finished class or ``-1`` (and asks for classification, which then finds it done). When
capacity runs out every array is re-allocated, so old snapshots stay consistent.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref

import numpy as np

from ..kernels import (
    NO_SKIP,
    SLICE_TOO_MANY_GROUPS,
    SLICE_WALK_FRAMES,
    SLICE_WALK_SETS,
    DeadlineExceededError,
    bitset_positions,
    bytes_off_loop,
    classify,
    context_hash,
    grouped_slice_walk,
    joint_byte_classes,
    layout,
    looping_leads,
    multi_slice_dfa_walk,
    new_multi_sets,
    new_slice_walk_sets,
    positions_to_bitset,
    reads_string_text,
    slice_byte_groups,
    slice_dfa_walk,
    slice_reach,
    state_signature,
    wide_near_rule_end,
)
from ._class_cache import NO_BASE, SIGNATURE_CAP, StringSlice, class_cache_for, read_only

__all__ = ["MaskStore", "context_entries", "prepare_vocabulary"]

KIND_LIST = 0
KIND_BITSET = 1
# Nodes a slice containment check explores before it gives up.
SLICE_CHECK_CAP = 16384
# ... and a speculative one: a counted slice's attempts that keep multi-byte characters
# (most of their failures are a check out of nodes, which the attempt without them avoids)
_SPECULATIVE_CHECK_CAP = 2048
# Token length limits (bytes) of the limited JSON string slices: a state that surely accepts
# n characters of string text but not provably exactly n walks the tokens outside the
# largest limited slice that fits.
_SLICE_BYTES = (8, 16, 32, 64)
# Characters of string text the slice check looks ahead at most. The check's cost grows
# with its depth (a length-bounded string makes new nodes at every character), and only
# a few dozen tokens are longer than 64 characters: a state that reads every text of 64
# characters takes the 64-byte slice and walks the rest, a 16 % larger trie.
_SLICE_SEARCH_CHARS = _SLICE_BYTES[-1]
# ASCII characters a state must read and stay in (a loop of a pattern such as [^:\s]+)
# before a restricted slice is tried for it.
_RESTRICTED_MIN_LOOP = 16
# The lead bytes of the characters that a pattern's "." (line terminators) or \s (ECMA-262
# white space) leaves out of lead bytes it otherwise reads: U+0085 and U+00A0 (C2), U+1680
# (E1), U+2000-U+200A, U+2028, U+2029, U+202F, U+205F (E2), U+3000 (E3), U+FEFF (EF).
_PARTIAL_LEADS = np.zeros(4, dtype=np.uint64)
for _lead in (0xC2, 0xE1, 0xE2, 0xE3, 0xEF):
    _PARTIAL_LEADS[_lead >> 6] |= np.uint64(1 << (_lead & 63))
# States a counted loop's first-byte search visits (a class rule and its escapes: a few).
_FIRST_BYTES_STATES = 32
# Bytes a state must loop on before its walk skips the subtrees made of them (white space
# has four).
_LOOP_MIN_BYTES = 4
# A state with a short string slice first tries a walk of the whole trie of at most this
# many walk budgets (see MaskStore._class_of).
_TRIE_TRIAL_BUDGETS = 4
# Trie nodes of the short walk that a state without a string slice tries before it looks
# for a skip (MaskStore._class_of): a state that rejects all but a few first bytes scans the
# few hundred first-byte nodes and stops (on 700 held-out MaskBench schemas, 51k of the 54k
# such states classified finished within 1,024 nodes; their skip searches cost 1.4 s).
_QUICK_WALK_BUDGET = 1024
# A uint64 word of bits with every bit set.
_ALL_BITS = (1 << 64) - 1
# A state that moves back to itself on this many bytes reads raw bytes (free text).
_RAW_LOOP_BYTES = 128
# A walk that scans more trie nodes than this (about 0.1 ms) is expensive enough to be worth
# a signature, so that every state that classifies alike reuses its class.
WALK_BUDGET = 4096
# Slice tokens the rule DFA leaves undecided (a call or a possible end on their path) that
# a DFA slice walk hands to the chart along with the tokens outside the slice; with more,
# a trie of them costs more to build than the usual walk (see MaskStore._slice_dfa_walk).
_SLICE_WALK_MAX_UNDECIDED = 4096
# States found times byte classes past which a slice walk's bytes are not grouped
# (``kernels.slice_byte_groups``, about half a millisecond): the whole trie is walked.
_GROUP_MAX_WORK = 1 << 20
# Byte groups past which the slice walk reads the whole trie: the grouped trie of many
# groups saves less (a `format: regex` string's 105: 158k nodes, a third of the walk) and
# its build costs more (up to 8 ms against a 3 ms walk, the children of a node searched).
_MAX_GROUPS = 48
# A slice walk that took at least this long (thread CPU, ns) has the later walks of its
# byte grouping walk the grouped trie: a build costs about 3 ms. (Not by the tokens it
# accepted: a walk whose byte-loop shortcut reads large subtrees whole accepts a quarter
# of the vocabulary in 0.3 ms.)
_GROUPED_AFTER_NS = 1_500_000
# A context class is refined from its state's own class (only the own class's UNCERTAIN
# tokens walked) when that class leaves at most this many uncertain.
REFINE_MAX_UNCERTAIN = 16384
# Classes whose refinement parts (bitset, uncertain tokens and their trie: up to a few hundred
# KB) a store keeps for the next contexts (MaskStore._refine_parts).
_REFINE_PARTS_KEPT = 8


# States of one classify_states call that a slice walk takes along (MaskStore._joint_slice_walks):
# the branches of a union of strings, walked in one pass over the trie
_JOINT_WALK_STATES = 8
# ... and the tuples of their pair sets that pass may meet (kernels.multi_slice_dfa_walk)
_JOINT_WALK_PRODUCTS = 4096

# Slice tokens a grammar's store keeps by slice walk key (MaskStore._slice_walk_key), for the
# same string in the branches of a union: tens of KB each (the accepted ones as runs).
_SLICE_WALKS_KEPT = 16
# ... and walks kept as walked until one is asked for (a few hundred KB each): the copies of a
# string come one after the other in a mask's requests
_RECENT_WALKS_KEPT = 4
# States a slice walk key's window may hold (MaskStore._slice_walk_key). A string's own DFA
# in a union's branches has a few dozen; a long bounded string's or a union of patterns'
# windows (hundreds to thousands, 0.2 to 0.5 ms to hash) are unlike any other, so the key
# gives up early for them.
_SLICE_KEY_CAP = 128

# Bitset digests a store keeps by their base bitset and added positions (MaskStore._encoded),
# and the most positions such a key holds (a key is then no larger than the bitset itself)
_DIGESTS_KEPT = 4096
_DIGESTS_KEY_MAX = 4096
# Rows of a new store's class table (MaskStore._cls_meta): no held-out MaskBench grammar
# had more classes (at most 63 over 150 schemas).
_CLASSES_ROOM = 64

_NO_CONTEXT = np.zeros(0, dtype=np.int32)
_NO_TARGETS = read_only(np.zeros(0, dtype=np.int64))
UNCLASSIFIED, CONTEXT_FIRST = layout.UNCLASSIFIED, layout.CONTEXT_FIRST


def prepare_vocabulary(tokenizer_info) -> None:
    """Build now the tables of ``tokenizer_info``'s vocabulary that mask stores otherwise
    build at their first use in the process: the sorted vocabulary, the token table, and the
    whole and limited JSON string slices with the trie's text summary and suffix bits
    (about 20 ms on a 128k vocabulary). Idempotent and thread-safe."""
    sorted_vocab = tokenizer_info.sorted_vocab
    tokenizer_info.token_table  # noqa: B018 - built on first use
    shared = class_cache_for(sorted_vocab)
    n_words = (tokenizer_info.vocab_size + 31) // 32
    shared.string_slice(n_words, sorted_vocab.max_len)
    for max_bytes in _SLICE_BYTES:  # (a store asks for those below the longest token only)
        if max_bytes < sorted_vocab.max_len:
            shared.string_slice(n_words, max_bytes)


def _merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The increasing positions of two disjoint increasing int32 arrays (a stable sort of
    two runs is a merge; ``np.union1d`` hashes, tens of times slower)."""
    out = np.concatenate((a, b))
    out.sort(kind="stable")
    return out


def _runs(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the runs of consecutive values of the increasing int32 array
    ``positions``: a slice walk's accepted tokens are mostly runs, 50 times smaller so."""
    cut = np.flatnonzero(np.diff(positions) != 1) + 1
    starts = positions[np.concatenate(([0], cut))] if positions.shape[0] else positions[:0]
    lengths = np.diff(np.concatenate(([0], cut, [positions.shape[0]])))
    return starts.astype(np.int32), lengths[: starts.shape[0]].astype(np.int32)


def _from_runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The int32 positions whose runs are ``starts``, ``lengths`` (inverse of _runs)."""
    steps = np.ones(int(lengths.sum()), dtype=np.int32)  # each value is the last plus one
    if steps.shape[0]:
        steps[0] = starts[0]
        # ... but a run's first, which jumps from the previous run's last
        steps[np.cumsum(lengths)[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps, dtype=np.int32)


def _check_deadline(deadline: int) -> None:
    """Raise DeadlineExceededError once the monotonic clock is past ``deadline`` (0: none)."""
    if deadline > 0 and time.monotonic_ns() > deadline:
        raise DeadlineExceededError


def own_classes(state_class):
    """Plain class ids (-1: none) of ``state_class`` entries. A state marked CONTEXT_FIRST
    (``MaskStore.classify_states``) keeps the mark once classified alone: its entry is then
    ``CONTEXT_FIRST - 1 - class id``, so that the mask kernel still looks it up in context
    first (``kernels._mask.collect_classes``)."""
    c = np.asarray(state_class)
    return np.where(c < CONTEXT_FIRST, CONTEXT_FIRST - 1 - c, np.maximum(c, UNCLASSIFIED))


def _own_class(c: int) -> int:
    """:func:`own_classes` of one ``state_class`` entry, in plain Python (numpy's ``where``
    on a scalar costs microseconds per context request)."""
    return CONTEXT_FIRST - 1 - c if c < CONTEXT_FIRST else max(c, UNCLASSIFIED)


def _context_entry(key: tuple[int, ...], cid: int) -> list[int]:
    """The table words of context ``key`` = ``(s, m, chain.., callers..)``: the request as
    the mask kernels write it, then the class id."""
    return [-(len(key) + 1), *key, cid]


def context_entries(words: list[int]):
    """Split context-table words (``[-(3 + m + k), s, m, chain.., callers.., class id]``
    after one another, as :meth:`MaskStore.export_classes` writes them) into
    ``(offset, entry words)``, each entry ``1 - words[offset]`` words long (cut short at the
    end of ``words``; the loader's validator checks the lengths)."""
    i = 0
    while i < len(words):
        n = max(-words[i] + 1, 1)
        yield i, words[i : i + n]
        i += n


def _context_slot(table: np.ndarray, n_states: int, cap: int, key: list[int]) -> int:
    """The free slot of ``key`` (a request, see ``kernels._mask``) in the context table after
    ``n_states`` words of ``table``: the hash and probe order of
    ``kernels._mask.context_class``."""
    probe = np.zeros((2, len(key)), dtype=np.int32)
    probe[1] = key
    slot = int(context_hash(probe, 0, len(key))) & (cap - 1)
    while table[n_states + 2 + slot] != 0:
        slot = (slot + 1) & (cap - 1)
    return slot


# the hashers of _digest after their kind byte, per kind
_DIGEST_SEEDS = tuple(hashlib.blake2b(bytes((kind,)), digest_size=16) for kind in (0, 1))


def _digest(kind: int, accepted: np.ndarray, uncertain: np.ndarray) -> bytes:
    """BLAKE2b-128 of a classification (its kind, the accepted tokens as stored: a token-id
    bitset or a sorted id list, and the uncertain sorted positions): the de-duplication key
    of its class. The stored form follows from the set alone, so equal classes get equal
    keys; a short list hashes in microseconds where the bitset would take tens."""
    h = _DIGEST_SEEDS[kind].copy()  # (a copy of a keyed-in hasher: half the cost of a new one)
    h.update(accepted)  # (contiguous arrays: their bytes, without a copy)
    h.update(uncertain)
    return h.digest()


class _Pool:
    """A growable flat int32 array with spare capacity."""

    def __init__(self, capacity: int = 1024) -> None:
        self.data = np.zeros(capacity, dtype=np.int32)
        self.size = 0

    def append(self, values: np.ndarray) -> tuple[int, bool]:
        """Append; returns (offset, reallocated)."""
        if not values.shape[0]:  # (most classes' uncertain tokens)
            return self.size, False
        need = self.size + values.shape[0]
        grown = need > self.data.shape[0]
        if grown:
            bigger = np.zeros(max(need, 2 * self.data.shape[0]), dtype=np.int32)
            bigger[: self.size] = self.data[: self.size]
            self.data = bigger
        off = self.size
        self.data[off:need] = values
        self.size = need
        return off, grown


class MaskStore:
    """Per-state ACCEPTED / UNCERTAIN token sets, filled on demand.

    Thread-safe: any number of readers; classification is serialised by a lock.
    """

    # Trie nodes a walk may scan before its state's class is shared by signature. Classes
    # do not depend on it; treegram.warm_up lowers it on a throwaway grammar so that the
    # signature kernel is loaded before any request needs it.
    walk_budget: int = WALK_BUDGET

    def __init__(self, automaton, sorted_vocab, vocab_size: int) -> None:
        self._automaton_arrays = automaton.arrays()
        self._packed = automaton.packed  # what the kernels take: one array to type per call
        self._state_rule = automaton.state_rule
        self._rule_follow = automaton.rule_follow
        self._sorted_vocab = sorted_vocab
        self._shared = class_cache_for(sorted_vocab)
        self._n_rules = automaton.n_rules
        # (slice DFA, joint byte classes of it and the automaton, packed automaton): see
        # _slice_arguments
        self._slice_args: tuple | None = None
        # restricted slices by their excluded characters: (slice DFA, its byte classes)
        self._restricted: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._loop_arrays: tuple | None = None  # see _loops
        self._text_bits: list[int] | None = None  # see _restricted_slice
        # reads_string_text per state (see _reads_string_text): 0 not asked, 1 no, 2 yes; a
        # bytearray, as every new state asks it twice and a numpy scalar costs more
        self._text_readers = bytearray(automaton.n_states)
        # per rule: _context_of's answer without a context (asked of every new state)
        self._bare_contexts: list = [None] * int(automaton.n_rules)
        self._loop_counts: np.ndarray | None = None  # see _loop_bytes, -1: not asked
        self._slice_walk_arrays: tuple | None = None  # see _slice_walk_inputs
        # (rule, whether a slice byte may follow it) -> (the states it serves, sorted; the
        # byte grouping of their slice walks): see _slice_grouping
        self._slice_groupings: dict[tuple[int, bool], tuple] = {}
        # slice walk key (_slice_walk_key) -> [runs of the accepted, undecided, their bitset]
        # slice tokens (see _kept_slice_tokens)
        self._slice_walks: dict[tuple, list] = {}
        # the last walks' tokens by slice walk key, as walked (see _remember_slice_walk)
        self._recent_walks: dict[tuple, tuple] = {}
        self._last_rest: tuple | None = None  # see _rest_trie
        # (named base bitset, accepted and uncertain positions) -> class digest (see _encoded)
        self._bitset_digests: dict[tuple, bytes] = {}
        self._scratch: list = []  # classify_states' signature scratch (used under the lock)
        # the slice walks of states walked along with another's in the classify_states call
        # under way, by (state, followed) (see _walk_ahead)
        self._walked_ahead: dict[tuple[int, int], tuple] = {}
        # ... and their slice walk keys (see _slice_walk_key)
        self._slice_keys_ahead: dict[tuple[int, int], tuple | None] = {}
        # the states of the call under way left to their context (CONTEXT_FIRST) whose slice
        # walks do not depend on it (see classify_states)
        self._context_first_ahead: list[int] = []
        # state_signature's class_keep for a classification: every byte class
        self._every_class = np.ones(int(self._automaton_arrays[layout.A_N_CLASSES]), np.uint8)
        self._n_words = (vocab_size + 31) // 32
        self._lock = threading.Lock()
        self._n_states = automaton.n_states
        # Followed by the context table (kernels._mask.collect_classes) once one is needed.
        self._state_class = np.full(automaton.n_states, -1, dtype=np.int32)
        self._contexts: dict[tuple[int, ...], int] = {}  # (s, m, chain.., callers..) -> class
        # canonical context keys (see _canonical_context) -> class; not serialized (sharing
        # only: a loaded store finds its contexts in _contexts)
        self._canonical: dict[tuple[int, ...], int] = {}
        self._refine_kept: dict[int, tuple] = {}  # class id -> _refine_parts
        self._end_callers: dict[tuple[int, int], int] = {}  # (caller, rule) -> _end_caller
        # (rule of the caller, called rule) -> the first bare-end caller met (see _end_caller)
        self._end_reps: dict[tuple[int, int], int] = {}
        # Sized so that most grammars never grow them: a growth re-publishes the snapshot
        # (a copy of state_class and a registry write), and growing from 16 classes and
        # 1,024 accepted ids took four per grammar on held-out MaskBench (570 over 150
        # schemas; 107 with these sizes, where the median grammar has 21 classes and 9,377
        # accepted ids on the 128K vocabulary: two bitsets and some lists).
        # per class: kind, accepted offset, accepted length, uncertain offset, length
        self._cls_meta = np.zeros((_CLASSES_ROOM, 5), dtype=np.int64)
        self._acc = _Pool(2 * self._n_words + 1024)
        self._unc = _Pool()
        self._n_classes = 0
        self._index: dict[bytes, int] = {}
        # Weak references to callables called, under the lock, with every new snapshot.
        self._listeners: list[weakref.ref] = []
        self._publish()

    def _publish(self) -> None:
        # Called with the lock held (or before the store is shared).
        self._snap = (self._state_class, self._cls_meta, self._acc.data, self._unc.data)
        alive = []
        for ref in self._listeners:
            listener = ref()
            if listener is not None:
                listener(self._snap)
                alive.append(ref)
        self._listeners = alive

    def snapshot(self) -> tuple:
        """(state_class, cls_meta, acc_pool, unc_pool), as ``fill_row`` takes them."""
        return self._snap

    def subscribe(self, listener) -> None:
        """Call ``listener(snapshot)`` now and after every re-allocation, under the lock.

        Subscribing and the first call happen under the lock that every publication
        takes, so a listener never misses a snapshot published while it subscribed (the
        batch registry relies on this: a stale snapshot would make batch kernels ask for
        classification forever). ``listener`` is held weakly: calls stop once the caller
        drops it, so stores shared by several grammars do not accumulate dead listeners.
        """
        with self._lock:
            self._listeners.append(weakref.ref(listener))
            listener(self._snap)

    def export_classes(self) -> tuple:
        """A consistent copy of the classification so far, taken under the lock.

        Returns
        -------
        tuple
            ``(state_class, meta, digests, acc, unc, contexts)``: int32 [n_states], int64
            [n_classes, 5], uint8 [n_classes, 16] (each class's de-duplication key), the
            int32 accepted and uncertain pools, and the context classes as int32 entries
            ``[-(3 + m + k), state, m, chain.., callers.., class id]``. The serializer
            writes them as they are.
        """
        with self._lock:
            n = self._n_classes
            # not the contexts, and plain class ids (a loaded store marks CONTEXT_FIRST again
            # when a mask first requests such a state)
            state_class = own_classes(self._state_class[: self._n_states])
            meta = self._cls_meta[:n].copy()
            acc = self._acc.data[: self._acc.size].copy()
            unc = self._unc.data[: self._unc.size].copy()
            index = dict(self._index)
            contexts = np.array(
                [w for key, cid in self._contexts.items() for w in _context_entry(key, cid)],
                dtype=np.int32,
            )
        digests = np.zeros((n, 16), dtype=np.uint8)
        for key, cid in index.items():
            digests[cid] = np.frombuffer(key, dtype=np.uint8)
        return state_class, meta, digests, acc, unc, contexts

    def install_classes(
        self,
        state_class: np.ndarray,
        meta: np.ndarray,
        digests: np.ndarray,
        acc: np.ndarray,
        unc: np.ndarray,
        contexts: np.ndarray,
    ) -> None:
        """Fill this (still empty, unpublished) store with loaded classes.

        Must run before any matcher or batch registry sees the store. The arrays must be
        validated and writable (the store classifies new states into them in place; the
        pools and the metadata grow by re-allocation, so views of one buffer are fine).

        Parameters
        ----------
        state_class : int32 [n_states]
        meta : int64 [n_classes, 5]
        digests : uint8 [n_classes, 16]
            BLAKE2b-128 of each class's verdict array: the de-duplication index, so a state
            classified later reuses an existing class exactly as in the original.
        acc, unc : int32 [pool size]
        contexts : int32 [words]
            Context classes, as :meth:`export_classes` gives them.
        """
        n = meta.shape[0]
        cls_meta = np.zeros((max(16, 2 * n), 5), dtype=np.int64)
        cls_meta[:n] = meta
        raw = digests.tobytes()
        loaded = {tuple(e[1:-1]): e[-1] for _, e in context_entries(contexts.tolist())}
        with self._lock:
            self._state_class = state_class
            self._contexts = loaded
            self._cls_meta = cls_meta
            self._acc.data, self._acc.size = acc, acc.shape[0]
            self._unc.data, self._unc.size = unc, unc.shape[0]
            self._n_classes = n
            self._index = {raw[16 * i : 16 * i + 16]: i for i in range(n)}
            if loaded:
                self._rebuild_contexts()  # publishes
            else:
                self._publish()

    @property
    def n_classes(self) -> int:
        """Number of distinct classifications stored."""
        return self._n_classes

    @property
    def n_classified_states(self) -> int:
        """Number of states classified so far."""
        return int(np.count_nonzero(own_classes(self._state_class[: self._n_states]) >= 0))

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by the stored token sets."""
        return int(
            4 * (self._acc.size + self._unc.size) + 33 * self._n_classes + self._state_class.nbytes
        )

    def classify_states(self, states, from_mask: bool = False, deadline: int = 0) -> bool:
        """Make sure every request in ``states`` has a class: states, or context keys
        ``-(3 + m + k), s, m, chain_1 .. chain_m, caller_1 .. caller_k`` as the mask
        kernels write them (``kernels._mask.collect_classes``).

        With ``from_mask`` (the requests of a mask kernel), a state inside a string body
        close to its rule's end (``kernels.wide_near_rule_end``) is only marked
        ``CONTEXT_FIRST``: its own class would leave most tokens UNCERTAIN and cost a walk
        of nearly the whole trie, so the kernel asks for its class in context instead, and
        for the state itself only when the item has no usable context.

        Past ``deadline`` (monotonic nanoseconds, 0: none; checked during each walk too) it
        stops and returns False: the requests classified so far keep their classes, the one
        being walked gets none. Returns True when every request has its class."""
        requests = np.asarray(states).tolist()
        with self._lock:
            try:
                # the signature kernel's scratch, made on first need and kept: it comes back all
                # -1, and allocating it (n_states) took 0.4 ms per request on large grammars
                scratch = self._scratch
                i = 0
                while i < len(requests):
                    if deadline > 0 and time.monotonic_ns() > deadline:
                        return False
                    s = requests[i]
                    if s < 0:  # a context key: s, m, the chain, the top-level callers
                        key = tuple(requests[i + 1 : i - s])
                        i -= s
                        if key not in self._contexts:
                            canon = self._canonical_context(key)
                            cid = self._canonical.get(canon)
                            if cid is not None:  # an equivalent context was classified
                                self._add_context(key, cid, False)
                                continue
                            own = _own_class(int(self._state_class[key[0]]))
                            try:
                                if own >= 0 and self._cls_meta[own, 4] <= REFINE_MAX_UNCERTAIN:
                                    digest, encoded = self._refined(own, key[0], key[1:], deadline)
                                else:
                                    digest, encoded = self._class_of(
                                        key[0], scratch, key[1:], deadline, (requests, i)
                                    )
                            except DeadlineExceededError:
                                return False
                            cid, grown = self._insert(digest, *encoded)
                            self._canonical[canon] = cid
                            self._add_context(key, cid, grown)
                        continue
                    i += 1
                    c = self._state_class[s]
                    if c >= 0 or c < CONTEXT_FIRST:  # classified (see own_classes)
                        continue
                    if c == UNCLASSIFIED and from_mask and self._context_first(s):
                        self._state_class[s] = CONTEXT_FIRST
                        if not self._slice_follow(s, self._context_of(s, ()))[1]:
                            # its context comes in the mask's next requests; where no slice
                            # byte follows its rule, the slice walk there is this (s, 0)
                            # walk, which a walk of this call may take along (_walk_ahead)
                            self._context_first_ahead.append(s)
                        continue
                    try:
                        # (the later requests: a slice walk of s may take their states along)
                        digest, encoded = self._class_of(s, scratch, (), deadline, (requests, i))
                    except DeadlineExceededError:
                        return False
                    self._assign(s, *self._insert(digest, *encoded))
                return True
            finally:
                # (walks taken along are kept for this call only, but those of the states
                # left to their context, which the next call asks: for that one too)
                if self._walked_ahead or self._slice_keys_ahead or self._context_first_ahead:
                    self._forget_walks_ahead()

    def _forget_walks_ahead(self) -> None:
        """The end of a :meth:`classify_states` call that took walks along (lock held):
        forget them, but for the (s, 0) walks of states left to their context."""
        carried = {}
        for t in self._context_first_ahead:
            found = self._walked_ahead.get((t, 0))
            if found is not None:
                carried[(t, 0)] = found
        self._context_first_ahead.clear()
        self._walked_ahead.clear()
        self._walked_ahead.update(carried)
        self._slice_keys_ahead.clear()

    def _context_first(self, s: int) -> bool:
        """Whether the mask should look state ``s`` up in context before classifying it
        alone (see :meth:`classify_states`)."""
        return self._reads_string_text(s) and bool(
            wide_near_rule_end(
                *self._slice_arguments(),
                s,
                self._sorted_vocab.max_len,
            )
        )

    def _reads_string_text(self, s: int) -> bool:
        """False when state ``s``, without a context, surely cannot read string text (see
        ``kernels.reads_string_text``); computed per state on first need."""
        known = self._text_readers[s]
        if not known:
            known = 2 if reads_string_text(*self._slice_arguments(), int(s)) else 1
            self._text_readers[s] = known
        return known == 2

    def classify_all(self) -> None:
        """Classify every state now (eager compilation)."""
        self.classify_states(self.unclassified_states())

    # -- parallel classification: compute outside the lock, insert in order ---------------

    def unclassified_states(self) -> np.ndarray:
        """int64 [n]: the states without a class yet, in increasing order."""
        return np.flatnonzero(own_classes(self._state_class[: self._n_states]) < 0)

    def compute_classes(self, states) -> tuple[list[bytes], dict[bytes, tuple]]:
        """Classify ``states`` without taking the lock (safe from any number of threads).

        The vocabulary walk is a numba ``nogil`` kernel, so threads run it in parallel.
        Nothing is stored: hand the result to :meth:`insert_classes`.

        Returns
        -------
        keys : list of bytes
            The class digest of each state, in the order of ``states``.
        encoded : dict
            digest -> (kind, payload, uncertain), one entry per distinct class.
        """
        keys: list[bytes] = []
        encoded: dict[bytes, tuple] = {}
        scratch: list = []  # the signature kernel's scratch, made on first need
        for s in states:
            key, payload = self._class_of(int(s), scratch)
            if key not in encoded and key not in self._index:
                encoded[key] = payload
            keys.append(key)
        return keys, encoded

    def insert_classes(self, states, keys: list[bytes], encoded: dict[bytes, tuple]) -> None:
        """Store classes computed by :meth:`compute_classes`, under the lock, in the order of
        ``states``: new class ids are given exactly as :meth:`classify_states` would give
        them over the same states, so the result does not depend on how the states were
        split between threads. States classified meanwhile keep their class."""
        with self._lock:
            for s, key in zip(states, keys, strict=True):
                s = int(s)
                if own_classes(self._state_class[s]) >= 0:
                    continue
                self._assign(s, *self._insert(key, *encoded.get(key, (None, None, None))))

    # -- internals -------------------------------------------------------------------------

    def _signature_scratch(self, scratch: list) -> None:
        """Fill the empty list ``scratch`` with the signature kernel's scratch arrays."""
        scratch += [
            np.full(self._n_states, -1, dtype=np.int32),
            np.full(self._n_rules, -1, dtype=np.int32),
        ]

    def _signature(self, s: int, scratch: list, context: tuple) -> tuple[int, int] | None:
        """The classification signature of state ``s`` in ``context`` (None when its window
        is too big). ``scratch`` holds the kernel's scratch arrays, made here when it is
        empty."""
        if not scratch:
            self._signature_scratch(scratch)
        _, _, chain_targets, top_targets, follow = context
        ok, h0, h1 = state_signature(
            self._packed,
            s,
            chain_targets,
            top_targets,
            follow,
            self._every_class,
            self._sorted_vocab.max_len,
            SIGNATURE_CAP,
            self._shared.key0,
            self._shared.key1,
            *scratch,
        )
        return (int(h0), int(h1)) if ok else None

    def _class_of(
        self,
        s: int,
        scratch: list,
        context_key: tuple[int, ...] = (),
        deadline: int = 0,
        ahead: tuple | None = None,
    ) -> tuple[bytes, tuple]:
        """(digest, (kind, payload, uncertain)) of state ``s`` (in the context
        ``context_key`` = ``(m, chain.., callers..)``, see :meth:`_context_of`): from the
        vocabulary's shared class cache when a state with the same signature was classified
        before, else from a walk of the token trie (then shared). ``ahead`` is
        ``(requests, i)`` in :meth:`classify_states` (lock held): its requests from ``i``
        on, whose states a slice walk of ``s`` may take along."""
        _check_deadline(deadline)  # the caller's checks may be a while ago (_context_first)
        context = self._context_of(s, context_key)
        if self._walked_ahead:
            # walked along with another state's slice walk (see _walk_ahead): the class follows
            # from that walk and the chart on the rest, as exactly as from the checks and
            # walks below (a millisecond or more of them: the slice check, the short walks,
            # the signature, which then shares no class)
            followed = self._slice_follow(s, context)[1]
            if (s, followed) in self._walked_ahead:
                slice_key = self._slice_keys_ahead.get((s, followed))
                walked = self._slice_dfa_walk(s, context, deadline, slice_key=slice_key)
                if walked is not None:
                    return self._encoded(*walked)
        signature = None
        base = None  # the walk's base bitset, named (see _encoded)
        string_slice, reach = self._string_slice(s, context, deadline)
        skip = NO_SKIP
        walked = None
        if string_slice is None:
            # Most such states (keys, punctuation, numbers) reject all but a few first bytes
            # and walk under a thousand trie nodes: a short walk without a skip comes first,
            # as the search for one (_restricted_slice, _loop_skip) costs more than that walk
            # (tens of microseconds of Python per state; a skip shortens a walk, it never
            # changes its classes)
            walked = self._walk(s, None, 0, self._quick_budget(), context, deadline)
            if walked is None and (self._slice_walks or self._recent_walks):
                # The copies of a string in a union's branches walk the slice alike: the
                # first one's slice tokens are kept, and the chart walk of the rest is
                # shorter than the search for a skip and the budgeted walk that fail
                # before it (0.6 ms a copy: ten copies, Github_hard---o33131)
                walked = self._walk_kept(s, scratch, context, deadline)
            if walked is None:
                loop = self._byte_loop(s)
                if not context_key or not self._packed[layout.PACK_UNIQUE]:
                    # (text the state reads inside its own rule is read in any context; a
                    # unique rule's completion would make such a token UNCERTAIN there)
                    skip = self._restricted_slice(s, deadline, loop)
                if skip is NO_SKIP:
                    skip = self._loop_skip(s, loop)
        if (
            walked is None
            and string_slice is not None
            and string_slice.max_bytes < self._sorted_vocab.max_len
            and self._enters_raw_byte_loop(s)
        ):
            # A slice of short texts leaves every longer token to the walk (tens of
            # thousands). Free text before a fixed end (a reasoning block before </think>)
            # reads slice texts of only a few characters for sure, as its end may come, but
            # loops on nearly every byte: a walk of the whole trie that accepts the subtrees
            # of the byte loops it meets whole is far shorter (exact either way; a few times
            # the usual budget, as the slice walk it saves costs tens of thousands). Only
            # where such a loop is entered: a pattern's loops read characters, and their
            # trial walks ran out of budget (a third more mask time on MaskBench).
            budget = self.walk_budget * _TRIE_TRIAL_BUDGETS
            walked = self._walk(s, None, 0, budget, context, deadline)
        if walked is None:
            walked = self._walk(s, string_slice, reach, self.walk_budget, context, deadline, skip)
            if walked is not None:
                base = self._slice_base(string_slice, reach)
        slice_key = None
        if walked is None:
            # An expensive state. The same string in another branch of a union walked the
            # slice alike: its slice tokens are known, the chart walks the rest (cheaper
            # than the signature, which differs: the branches go on with other keys).
            slice_key = self._slice_walk_key(s, scratch, context)
            walked = self._walk_kept(s, scratch, context, deadline)
        if walked is None:
            # Share its class with every state that classifies alike.
            signature = self._signature(s, scratch, context)
            _check_deadline(deadline)
            if signature is not None:
                hit = self._shared.get(signature)
                if hit is not None:
                    return hit[0], hit[1:]
            if (skip is NO_SKIP or self._skips_no_multi_byte_text(s, skip)) and (
                string_slice is None or string_slice.max_bytes < self._sorted_vocab.max_len
            ):  # (a walk that skips loops' subtrees whole is the shorter one)
                walked = self._slice_dfa_walk(
                    s, context, deadline, slice_key=slice_key, ahead=ahead
                )
            elif skip[3] > 0:
                # A restricted slice leaves the walk every token with a byte outside it: a
                # pattern key like [0-9a-f]{32} reads any text but leaves its loop on hex
                # digits, and its walk scans most of the trie (7.5 ms, Github_easy---o78130).
                # Where the slice grouping's trie is built already, the grouped slice walk
                # costs a fraction of that (20 ms against 31 ms over the 19 such states of
                # held-out MaskBench, none more than 0.1 ms slower); a build is not worth it.
                walked = self._slice_dfa_walk(
                    s, context, deadline, slice_key=slice_key, grouped_only=True
                )
            if walked is None:
                walked = self._walk(s, string_slice, reach, 0, context, deadline, skip)
                base = self._slice_base(string_slice, reach)
                if string_slice is None:  # (else not every accepted token is listed)
                    self._keep_slice_part(slice_key, context, walked)
        key, encoded = self._encoded(*walked, base)
        if signature is not None:
            self._shared.put(signature, (key, *encoded))
        return key, encoded

    def _walk_kept(
        self, s: int, scratch: list, context: tuple, deadline: int = 0
    ) -> tuple[np.ndarray | None, int, np.ndarray, np.ndarray] | None:
        """:meth:`_walk`'s result for state ``s`` (in ``context``) from the slice tokens
        kept under its slice walk key (:meth:`_slice_walk_key`, :meth:`_kept_slice_tokens`):
        the chart walks only the tokens outside the slice and the undecided ones. None when
        none are kept."""
        slice_key = self._slice_walk_key(s, scratch, context)
        tokens = self._kept_slice_tokens(slice_key) if slice_key is not None else None
        if tokens is None:
            return None
        return self._with_rest(s, context, tokens[0], tokens[1], deadline, tokens[2])

    def _skips_no_multi_byte_text(self, s: int, skip: tuple) -> bool:
        """Whether ``skip``, a restricted slice of state ``s``, leaves out every multi-byte
        character although ``s`` reads some (``_counted_slice``'s last attempt): its walk
        then scans every token holding one (a third of a large vocabulary's trie), and the
        slice DFA walk, which reads them as slice text, is the shorter one (a free-form key
        beside 108 optional properties, Github_hard---o61596: 10.3 ms with the skip against
        5.5 ms). Either walk gives the same classes."""
        excluded = skip[2]
        return (
            skip[3] > 0  # a restricted slice's reach (a byte loop's skip has none)
            and int(excluded[2]) == _ALL_BITS
            and int(excluded[3]) == _ALL_BITS
            and bool(self._first_bytes(s)[0xC2:0xF5].any())
        )

    def _quick_budget(self) -> int:
        """The node budget of :meth:`_class_of`'s first, short walk: _QUICK_WALK_BUDGET, or
        the store's walk budget when that is smaller (warm-up lowers it to 1)."""
        budget = self.walk_budget
        return _QUICK_WALK_BUDGET if budget <= 0 else min(budget, _QUICK_WALK_BUDGET)

    def _slice_base(self, string_slice: StringSlice | None, reach: int) -> tuple | None:
        """The name of the base bitset that :meth:`_walk` adds a walk's accepted tokens to
        with ``string_slice`` and ``reach`` (None without a slice): the slice's length limit,
        and the reach when only the slice tokens of at most that many characters are in it."""
        if string_slice is None:
            return None
        max_len = self._sorted_vocab.max_len
        whole = string_slice.max_bytes == max_len and reach < max_len
        return (string_slice.max_bytes, reach if whole else -1)

    def _encoded(
        self,
        bitset: np.ndarray | None,
        n_accepted: int,
        accepted: np.ndarray,
        uncertain: np.ndarray,
        base: tuple | None = None,
    ) -> tuple[bytes, tuple]:
        """(digest, (kind, payload, uncertain)) of a class: its accepted tokens as a bitset
        (``n_accepted`` of them; ``accepted`` lists the sorted positions of those a walk
        met; ``bitset`` may be None when they are all of them and fewer than a bitset's
        words), stored as a bitset or, when shorter, a token-id list.

        ``base`` names the bitset (:meth:`_slice_base`) that ``bitset`` is with the
        ``accepted`` positions added: the bitset, hence its digest, follows from the name
        and the two position lists, so the digest is kept under them. The states of string
        bodies walk the few tokens outside the slice and mostly find a class met before
        (three in four on held-out MaskBench schemas), whose bitset's digest (16 KB of
        BLAKE2b) cost more than the rest of their bookkeeping."""
        if n_accepted >= self._n_words:
            encoded = (KIND_BITSET, bitset, uncertain)
            if base is not None and accepted.shape[0] + uncertain.shape[0] <= _DIGESTS_KEY_MAX:
                name = (base, accepted.tobytes(), uncertain.tobytes())
                digest = self._bitset_digests.get(name)
                if digest is None:
                    digest = _digest(*encoded)
                    if len(self._bitset_digests) < _DIGESTS_KEPT:
                        self._bitset_digests[name] = digest
                return digest, encoded
        else:
            if n_accepted == accepted.shape[0]:  # every accepted token was walked
                # (take: a third of the cost of fancy indexing on the short lists of most states)
                ids = self._sorted_vocab.token_ids.take(accepted).astype(np.int32, copy=False)
                ids.sort()
            else:  # others too: read them off the bitset
                ids = bitset_positions(bitset)
            encoded = (KIND_LIST, ids, uncertain)
        return _digest(*encoded), encoded

    def _refined(
        self, own: int, s: int, context_key: tuple[int, ...], deadline: int = 0
    ) -> tuple[bytes, tuple]:
        """(digest, (kind, payload, uncertain)) of state ``s`` in the context ``context_key``,
        from its own class ``own``: a token ACCEPTED alone is read inside the state's rule
        whatever the callers, and a REJECTED one fails before the rule could end, so only
        the own class's UNCERTAIN tokens are walked, in the context."""
        sv = self._sorted_vocab
        base, n_base, candidates, trie = self._refine_parts(own)
        states, n_top, _, _, follow = self._context_of(s, context_key)
        u_len = candidates.shape[0]
        if u_len:
            _check_deadline(deadline)
            accepted, uncertain = classify(
                self._packed,
                s,
                follow,
                trie,
                u_len,
                sv.max_len,
                0,
                states,
                n_top,
                deadline,
            )
            accepted, uncertain = candidates[accepted], candidates[uncertain]
        else:
            accepted = uncertain = _NO_CONTEXT
        bitset = positions_to_bitset(sv.token_ids, accepted, self._n_words, base)
        return self._encoded(bitset, n_base + accepted.shape[0], accepted, uncertain)

    def _refine_parts(self, own: int) -> tuple:
        """(accepted token bitset, its count, uncertain sorted positions, their trie or None)
        of class ``own``, for :meth:`_refined`; the last _REFINE_PARTS_KEPT classes' are
        kept (the contexts of a state come one after the other, each refining its class)."""
        kept = self._refine_kept.get(own)
        if kept is not None:
            return kept
        _, a_off, a_len, u_off, u_len = (int(v) for v in self._cls_meta[own])
        # positions_to_bitset takes read-only ids and base, as everywhere (one specialization)
        if self._cls_meta[own, 0] == KIND_BITSET:
            base = read_only(self._acc.data[a_off : a_off + a_len].copy())
            n_base = int(np.bitwise_count(base.view(np.uint32)).sum())
        else:
            ids = read_only(self._acc.data[a_off : a_off + a_len])
            every = np.arange(a_len, dtype=np.int32)
            base = read_only(positions_to_bitset(ids, every, self._n_words, NO_BASE))
            n_base = a_len
        # (a copy: the pool is re-allocated as it grows)
        candidates = self._unc.data[u_off : u_off + u_len].copy()
        trie = self._sorted_vocab.subset_trie(candidates) if u_len else None
        if len(self._refine_kept) >= _REFINE_PARTS_KEPT:
            del self._refine_kept[next(iter(self._refine_kept))]
        kept = self._refine_kept[own] = (base, n_base, candidates, trie)
        return kept

    def _context_of(self, s: int, context_key: tuple[int, ...]) -> tuple:
        """The classification context of ``s``: ``(states, n_top, chain_targets,
        top_targets, follow)`` for the kernels (``kernels._classify``, ``_slices``).

        ``context_key`` is ``(m, chain_1 .. chain_m, caller_1 .. caller_k)`` as the mask
        kernel found it: ``chain_1`` calls ``s``'s rule and each next chain state calls the
        previous one's rule, all as tail calls; the callers call the chain's top rule (or
        ``s``'s rule when ``m`` is 0). Empty: no context, the state's own rule's follow."""
        rule = int(self._state_rule[s])
        if not context_key:
            found = self._bare_contexts[rule]
            if found is None:
                found = (_NO_CONTEXT, 0, _NO_TARGETS, _NO_TARGETS, self._rule_follow[rule])
                self._bare_contexts[rule] = found
            return found
        m = context_key[0]
        chain = context_key[1 : 1 + m]
        callers = context_key[1 + m :]
        chain_targets = []
        for c in chain:
            chain_targets.append(self._return_state(c, rule))
            rule = int(self._state_rule[c])
        top_targets = sorted({self._return_state(c, rule) for c in callers})
        if callers:
            follow = np.zeros(256, dtype=np.uint8)
            for c in callers:
                follow |= self._rule_follow[self._state_rule[c]]
        else:  # the chain's top rule ends the context
            follow = self._rule_follow[rule]
        return (
            np.array([*callers, *reversed(chain)], dtype=np.int32),
            len(callers),
            read_only(np.array(chain_targets, dtype=np.int64)),
            read_only(np.array(top_targets, dtype=np.int64)),
            follow,
        )

    def _canonical_context(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """The canonical form of the context key ``key`` = ``(s, m, chain.., callers..)``:
        each chain state and caller replaced by :meth:`_end_caller` (the callers as a sorted
        set). Keys with equal canonical forms classify alike.

        A context enters a classification only through its states' calls: the walk's
        virtual chart holds each chain state and caller as an item waiting for the rule
        below it, and when that rule ends the item moves over the call to its return
        state. A caller whose every return state for that rule is a bare end (final, no
        byte and no call edge) just ends its own rule there, as any other such caller of
        the same rule in the same rule does; follow sets and lookaheads are per rule. So the
        nested choice rules of a length-bounded string (``automaton._repeats``: a block
        called in the low or the high branch of a choice, each ending its rule) give one
        class per position, not one per branch path."""
        s, m = key[0], key[1]
        rule = int(self._state_rule[s])
        out = [s, m]
        for c in key[2 : 2 + m]:
            out.append(self._end_caller(c, rule))
            rule = int(self._state_rule[c])
        out += sorted({self._end_caller(c, rule) for c in key[2 + m :]})
        return tuple(out)

    def _end_caller(self, caller: int, rule: int) -> int:
        """The first state met (per store) of ``caller``'s rule whose every call of ``rule``
        returns to a bare end state, when ``caller`` is such a state; else ``caller``."""
        got = self._end_callers.get((caller, rule))
        if got is None:
            a = self._automaton_arrays
            ref_ptr, ref_rule, ref_target = (
                a[layout.A_REF_PTR],
                a[layout.A_REF_RULE],
                a[layout.A_REF_TARGET],
            )
            n_classes, trans = a[layout.A_N_CLASSES], a[layout.A_TRANS]
            final = a[layout.A_STATE_FINAL]
            targets = [
                int(ref_target[e])
                for e in range(int(ref_ptr[caller]), int(ref_ptr[caller + 1]))
                if ref_rule[e] == rule
            ]
            bare = bool(targets) and all(
                final[t]
                and ref_ptr[t] == ref_ptr[t + 1]
                and not (trans[t * n_classes : (t + 1) * n_classes] >= 0).any()
                for t in targets
            )
            got = caller
            if bare:  # the first such caller of its rule met stands for them all
                rep = (int(self._state_rule[caller]), rule)
                got = self._end_reps.setdefault(rep, caller)
            self._end_callers[(caller, rule)] = got
        return got

    def _return_state(self, caller: int, rule: int) -> int:
        """The state ``caller`` reaches when its call of ``rule`` returns."""
        a = self._automaton_arrays
        ref_ptr, ref_rule = a[layout.A_REF_PTR], a[layout.A_REF_RULE]
        for e in range(int(ref_ptr[caller]), int(ref_ptr[caller + 1])):
            if ref_rule[e] == rule:
                return int(a[layout.A_REF_TARGET][e])
        raise KeyError(f"state {caller} does not call rule {rule}")  # a corrupt key

    def _slice_arguments(self) -> tuple:
        """The arguments that ``slice_reach``, ``wide_near_rule_end`` and
        ``reads_string_text`` take before the state: the whole JSON string slice's DFA, one
        byte of each class of bytes that neither that DFA nor this automaton tells apart,
        then the packed automaton."""
        found = self._slice_args
        if found is None:  # (asked of every new state: built once)
            a = self._automaton_arrays
            whole = self._shared.string_slice(self._n_words, self._sorted_vocab.max_len)
            reps = joint_byte_classes(whole.dfa, a[layout.A_BYTE_CLASS])
            found = self._slice_args = (whole.dfa, reps, self._packed)
        return found

    def _string_slice(
        self, s: int, context: tuple, deadline: int = 0
    ) -> tuple[StringSlice | None, int]:
        """The JSON string slice that state ``s`` is checked against, and how many of its
        tokens' characters it accepts without a walk: ``(whole slice, max_len)`` when it
        accepts every slice token; ``(whole slice, n)`` when it accepts exactly the slice
        tokens of at most ``n`` characters (the longer ones are rejected); ``(slice of the
        tokens of at most n bytes, n)`` when it accepts at least those; ``(None, 0)``.

        Raises
        ------
        DeadlineExceededError
            The monotonic clock passed ``deadline`` (nanoseconds, 0: none) during the check.
        """
        if not (context[2].shape[0] or context[3].shape[0] or self._reads_string_text(s)):
            return None, 0
        sv = self._sorted_vocab
        whole = self._shared.string_slice(self._n_words, sv.max_len)
        dfa_reps = self._slice_arguments()[:2]
        reach, exact = self._reach(dfa_reps, s, context[2], context[3], deadline)
        if reach >= sv.max_len or (exact and 0 < reach < min(sv.max_len, _SLICE_SEARCH_CHARS)):
            return whole, reach
        limits = [n for n in _SLICE_BYTES if n <= reach]
        if limits:
            return self._shared.string_slice(self._n_words, limits[-1]), limits[-1]
        return None, 0

    def _reach(
        self,
        dfa_reps: tuple,
        s: int,
        chain_targets,
        top_targets,
        deadline: int,
        cap: int = SLICE_CHECK_CAP,
    ) -> tuple[int, bool]:
        """``slice_reach`` of state ``s`` (in the context given by its return targets) for
        the slice DFA and byte classes ``dfa_reps``, looking ``_SLICE_SEARCH_CHARS``
        ahead at most.

        Raises
        ------
        DeadlineExceededError
            The monotonic clock passed ``deadline`` (nanoseconds, 0: none).
        """
        reach, exact = slice_reach(
            *dfa_reps,
            self._packed,
            s,
            chain_targets,
            top_targets,
            min(self._sorted_vocab.max_len, _SLICE_SEARCH_CHARS),
            _SLICE_BYTES[0],
            cap,
            deadline,
            np.zeros(2, dtype=np.int64),
        )
        if reach < 0:
            raise DeadlineExceededError
        return int(reach), bool(exact)

    def _loops(self) -> tuple:
        """The byte-loop arrays ``classify`` takes for a walk of the whole trie (the
        vocabulary's bytes below each node; this automaton's off-loop bytes per state,
        filled in by the walks as they meet states)."""
        if self._loop_arrays is None:
            self._loop_arrays = (
                self._shared.suffix_bits(),
                np.zeros((self._n_states, 4), dtype=np.uint64),
                np.zeros(self._n_states, dtype=np.int8),
            )
        return self._loop_arrays

    def _byte_loop(self, s: int) -> tuple[np.ndarray, int]:
        """``kernels.bytes_off_loop`` of state ``s``: the bytes it does not move back to
        itself on, and how many it does."""
        a = self._automaton_arrays
        return bytes_off_loop(
            a[layout.A_BYTE_CLASS], a[layout.A_N_CLASSES], a[layout.A_TRANS], int(s)
        )

    def _loop_bytes(self, s: int) -> int:
        """How many bytes state ``s`` moves back to itself on (:meth:`_byte_loop`'s
        second half), computed per state on first need: :meth:`_enters_raw_byte_loop` asks
        it of the same few rule starts for every state of a string."""
        known = self._loop_counts
        if known is None:
            known = self._loop_counts = np.full(self._n_states, -1, dtype=np.int16)
        n = int(known[s])
        if n < 0:
            n = int(self._byte_loop(s)[1])
            known[s] = n
        return n

    def _enters_raw_byte_loop(self, s: int) -> bool:
        """Whether state ``s``, or the first state of a rule it calls (three calls deep),
        moves back to itself on at least 128 bytes: free text that reads raw bytes (a
        loop over characters leaves on every lead byte of a multi-byte one)."""
        a = self._automaton_arrays
        ref_ptr, ref_rule, rule_start = (
            a[layout.A_REF_PTR],
            a[layout.A_REF_RULE],
            a[layout.A_RULE_START],
        )
        level = [int(s)]
        for _ in range(4):
            if any(self._loop_bytes(t) >= _RAW_LOOP_BYTES for t in level):
                return True
            level = [
                int(rule_start[ref_rule[e]])
                for t in level
                for e in range(ref_ptr[t], ref_ptr[t + 1])
            ]
            if not level:
                return False
        return False

    def _loop_skip(self, s: int, loop: tuple | None = None) -> tuple:
        """The byte loop of state ``s`` (``loop``: its :meth:`_byte_loop`, found here when
        None) as ``classify`` takes a skip, or ``NO_SKIP``: a token made only of bytes on
        which ``s`` moves back to itself is read staying in ``s``, so a trie subtree of
        such tokens is ACCEPTED whole (free text of a structural tag, white space:
        thousands of tokens a walk would otherwise scan)."""
        excluded, n_loop = self._byte_loop(s) if loop is None else loop
        if n_loop < _LOOP_MIN_BYTES:
            return NO_SKIP
        return (*self._shared.loop_summary(self._n_words), excluded, 0)

    def _restricted_slice(self, s: int, deadline: int = 0, loop: tuple | None = None) -> tuple:
        """A restricted JSON string slice that state ``s`` reads inside its own rule (so in
        any context), as ``classify`` takes it, or ``NO_SKIP``.

        A state that loops on most ASCII characters without reading every string character
        (``[^:\\s]+`` in a pattern) gets no JSON string slice, and its walk visits every
        token it accepts: tens of thousands, milliseconds. The slice without the characters
        it does not read back into itself (its own row for ASCII, ``looping_leads`` for
        multi-byte characters; then, if that fails, without any multi-byte character) is
        checked like the JSON string slice (``slice_reach``). When the state reads that
        text up to at least 8 characters, the walk accepts each subtree made only of it
        whole (``kernels.subtree_text_summary``), however the tokens end.

        Raises
        ------
        DeadlineExceededError
            The monotonic clock passed ``deadline`` (nanoseconds, 0: none).
        """
        a = self._automaton_arrays
        whole = self._shared.string_slice(self._n_words, self._sorted_vocab.max_len)
        off, _ = self._byte_loop(s) if loop is None else loop
        text = self._text_bits
        if text is None:  # the slice's ASCII characters, as two words of bits
            first = whole.dfa[0].tolist()
            text = [
                sum(1 << (b & 63) for b in range(64 * w, 64 * w + 64) if first[b] >= 0)
                for w in (0, 1)
            ]
            self._text_bits = text
        leaves = [int(off[w]) & text[w] for w in (0, 1)]  # those s does not loop on
        n_loops = sum((text[w] & ~leaves[w]).bit_count() for w in (0, 1))
        byte_class, trans = a[layout.A_BYTE_CLASS], a[layout.A_TRANS]
        if n_loops < _RESTRICTED_MIN_LOOP:
            return self._counted_slice(s, deadline, text)
        loops = looping_leads(
            whole.dfa, byte_class, a[layout.A_N_CLASSES], trans, a[layout.A_REF_PTR], s
        )
        leads = np.flatnonzero(whole.dfa[0, 128:] >= 0) + 128
        excluded = np.array([*leaves, 0, 0], dtype=np.uint64)
        for b in leads[~loops[leads]].tolist():
            excluded[b >> 6] |= np.uint64(1 << (b & 63))
        every_lead = excluded.copy()
        for b in leads.tolist():
            every_lead[b >> 6] |= np.uint64(1 << (b & 63))
        for attempt in (excluded, every_lead):
            skip = self._restricted_skip(whole, attempt, byte_class, s, deadline)
            if skip is not None:
                return skip
            if np.array_equal(attempt, every_lead):
                break
        return NO_SKIP

    def _counted_slice(self, s: int, deadline: int, text: list[int]) -> tuple:
        """A restricted JSON string slice for a state of a *counted* loop, as ``classify``
        takes it, or ``NO_SKIP``.

        A pattern with a length (``^[0-9a-zA-Z_-]{1,255}$``) is one state per position,
        each moving on to the next, not back to itself, so :meth:`_restricted_slice` finds
        no loop, and each position's walk visited every token of the class (tens of
        thousands, 10 to 50 ms, at every position of the string). The text the state has a
        byte transition on is checked like the other restricted slices (``slice_reach``,
        which proves the state reads all of it up to the reach, the count left in its
        block): first with the multi-byte characters whose lead bytes it reads (the first
        character of a key ``^[^$]``, followed by any text: without them every token with
        a multi-byte character, a hundred thousand trie nodes, was walked), then without the
        lead bytes of the characters that ``.`` and ``\\s`` leave out (``.{0,27}``: 14 ->
        3.6 ms); a state that reads no multi-byte character is checked without any (each
        would end a count of ASCII characters). One that reads some is not: the skip's walk
        would scan every token holding one (a third of a large vocabulary's trie) and give
        up, and the slice DFA walk classifies it (``_skips_no_multi_byte_text``); the check
        cost 2.4 ms per key state of Github_hard---o61596, the only schema of 700 held-out
        ones where it succeeded, and its walk never fitted the budget. The choice of text
        only decides whether the check can succeed, so the shortcut stays exact.

        Raises
        ------
        DeadlineExceededError
            The monotonic clock passed ``deadline`` (nanoseconds, 0: none).
        """
        a = self._automaton_arrays
        byte_class = a[layout.A_BYTE_CLASS]
        live = self._first_bytes(s)
        if int(np.count_nonzero(live[:128])) < _RESTRICTED_MIN_LOOP:
            return NO_SKIP  # most states: keys, punctuation, numbers
        whole = self._shared.string_slice(self._n_words, self._sorted_vocab.max_len)
        # the slice's characters the state cannot start with: ASCII ones, and the lead bytes
        # of multi-byte ones (a subtree's bits hold every byte of its tokens, so only
        # lead bytes may be excluded)
        chars = whole.dfa[0] >= 0
        unread = np.packbits(chars & ~live, bitorder="little").view(np.uint64)
        excluded = np.array(
            [text[0] & int(unread[0]), text[1] & int(unread[1]), unread[2], unread[3]],
            dtype=np.uint64,
        )
        no_multi_byte = excluded.copy()
        no_multi_byte[2:] = ~np.uint64(0)
        attempts: tuple = (no_multi_byte,)
        if (chars[128:] & live[128:]).any():
            # a pattern's "." or \S reads only some characters of a few lead bytes (line
            # terminators and white space: U+0085, U+2028, U+3000, ...)
            no_terminators = excluded | _PARTIAL_LEADS
            attempts = (excluded, no_terminators)
        for attempt in attempts:
            cap = SLICE_CHECK_CAP if attempt is no_multi_byte else _SPECULATIVE_CHECK_CAP
            skip = self._restricted_skip(whole, attempt, byte_class, s, deadline, cap)
            if skip is not None:
                return skip
        return NO_SKIP

    def _restricted_skip(
        self,
        whole,
        excluded: np.ndarray,
        byte_class: np.ndarray,
        s: int,
        deadline: int,
        cap: int = SLICE_CHECK_CAP,
    ) -> tuple | None:
        """The skip of the JSON string slice without the lead bytes ``excluded`` (its DFA
        built once per excluded set) when state ``s`` reads all of it up to its reach, as
        ``classify`` takes it; None when it does not reach far enough (or the check gives up
        after ``cap`` nodes)."""
        key = excluded.tobytes()
        found = self._restricted.get(key)
        if found is None:
            dfa = whole.restricted_dfa(excluded)
            found = self._restricted[key] = (dfa, joint_byte_classes(dfa, byte_class))
        reach, _ = self._reach(found, s, _NO_TARGETS, _NO_TARGETS, deadline, cap)
        if reach >= _SLICE_BYTES[0]:
            return (*self._shared.text_summary(self._n_words), excluded, reach)
        return None

    def _first_bytes(self, s: int) -> np.ndarray:
        """bool [256]: the bytes state ``s`` can read first, by its own transitions or
        through the rules it calls (a character class of a pattern is a rule: one character
        or its escape), looking at most ``_FIRST_BYTES_STATES`` states far."""
        a = self._automaton_arrays
        n_classes = int(a[layout.A_N_CLASSES])
        byte_class, trans = a[layout.A_BYTE_CLASS], a[layout.A_TRANS]
        ref_ptr, ref_rule, ref_target = (
            a[layout.A_REF_PTR],
            a[layout.A_REF_RULE],
            a[layout.A_REF_TARGET],
        )
        rule_start, rule_nullable = a[layout.A_RULE_START], a[layout.A_RULE_NULLABLE]
        live = np.zeros(256, dtype=np.bool_)
        todo, seen = [int(s)], {int(s)}
        while todo and len(seen) <= _FIRST_BYTES_STATES:
            x = todo.pop()
            live |= trans[x * n_classes + byte_class] >= 0
            for e in range(int(ref_ptr[x]), int(ref_ptr[x + 1])):
                rule = int(ref_rule[e])
                nxt = [int(rule_start[rule])]
                if rule_nullable[rule]:
                    nxt.append(int(ref_target[e]))
                for y in nxt:
                    if y not in seen:
                        seen.add(y)
                        todo.append(y)
        return live

    def _walk(
        self,
        s: int,
        string_slice: StringSlice | None,
        reach: int,
        budget: int,
        context: tuple,
        deadline: int = 0,
        skip: tuple = NO_SKIP,
    ) -> tuple[np.ndarray | None, int, np.ndarray, np.ndarray] | None:
        """Classify state ``s`` by a trie walk: (accepted token-id bitset, number accepted,
        sorted positions of the accepted tokens that the walk met, sorted positions of the
        uncertain tokens; the bitset is None when the walk met every accepted token and they
        are too few for one), or None past ``budget`` trie nodes (0: no limit). With the
        JSON string slice that the state contains (:meth:`_string_slice`), only the tokens
        outside it are walked; the slice's own tokens (up to ``reach`` characters) are all
        accepted. Without it, a restricted slice the state reads (``skip``, see
        :meth:`_restricted_slice`) is accepted subtree by subtree during the walk."""
        a = self._packed
        sv = self._sorted_vocab
        states, n_top, _, _, follow = context
        if string_slice is not None:
            outside = string_slice.outside
            walked = classify(
                a,
                s,
                follow,
                string_slice.outside_trie,
                outside.shape[0],
                sv.max_len,
                budget,
                states,
                n_top,
                deadline,
            )
            if walked is None:
                return None
            accepted, uncertain = walked
            accepted = outside.take(accepted)
            uncertain = outside.take(uncertain)
            if string_slice.max_bytes == sv.max_len and reach < sv.max_len:
                base, n_base = string_slice.bitset_upto(reach)
            else:
                base, n_base = string_slice.bitset, string_slice.n_members
            n_accepted = n_base + accepted.shape[0]
        else:
            walked = classify(
                a,
                s,
                follow,
                sv.trie,
                len(sv),
                sv.max_len,
                budget,
                states,
                n_top,
                deadline,
                skip,
                self._loops(),
            )
            if walked is None:
                return None
            accepted, uncertain = walked
            n_accepted = accepted.shape[0]
            if n_accepted < self._n_words:  # stored as a list: no bitset needed
                return None, n_accepted, accepted, uncertain
            base = NO_BASE
        bitset = positions_to_bitset(sv.token_ids, accepted, self._n_words, base)
        return bitset, n_accepted, accepted, uncertain

    def _keep_slice_part(self, key: tuple | None, context: tuple, walked: tuple) -> None:
        """Keep the tokens of a walk of the whole trie (``walked``, every accepted one
        listed) under the state's slice walk key ``key``, for the states that walk the slice
        alike (:meth:`_slice_walk_key`): their slice tokens, accepted and uncertain (for
        the chart: a walk of them gives each state its own answer). Without a context, or
        where no slice byte may follow the rule, a slice token's class depends on what the
        key describes alone; in a context the chart reads on into the callers."""
        if key is not None and not (key[2] and context[0].shape[0]):
            self._remember_slice_walk(key, walked[2], walked[3], True)

    def _remember_slice_walk(
        self, key: tuple, accepted: np.ndarray, undecided: np.ndarray, mixed: bool
    ) -> None:
        """Keep a walk's accepted and undecided tokens under ``key`` as they are (``mixed``:
        tokens outside the slice among them), among the last _RECENT_WALKS_KEPT walks: most
        are never asked for, and sorting out their slice tokens took 0.35 ms a walk."""
        if key in self._slice_walks:
            return
        recent = self._recent_walks
        recent.pop(key, None)
        if len(recent) >= _RECENT_WALKS_KEPT:
            del recent[next(iter(recent))]
        recent[key] = (accepted, undecided, mixed)

    def _kept_slice_tokens(self, key: tuple) -> tuple | None:
        """(accepted, undecided, base) slice tokens kept under ``key``, or None. A recent
        walk's asked for once is kept from then on (at most _SLICE_WALKS_KEPT, the oldest
        dropped first), its accepted tokens as runs of positions. Where they are at least a
        bitset's words (a string's text: most of the vocabulary), ``accepted`` is None and
        ``base`` is their token bitset (read-only, made once per key) and their number, as
        :meth:`_with_rest` takes them: decoding and merging a hundred thousand positions for
        every state that asks took half a millisecond each."""
        kept = self._slice_walks.get(key)
        if kept is not None:
            runs, undecided = kept[0], kept[1]
            n = int(runs[1].sum())
            if n < self._n_words:
                return _from_runs(*runs), undecided, None
            if kept[2] is None:
                bits = positions_to_bitset(
                    self._sorted_vocab.token_ids, _from_runs(*runs), self._n_words, NO_BASE
                )
                kept[2] = (read_only(bits), n)
            return None, undecided, kept[2]
        recent = self._recent_walks.pop(key, None)
        if recent is None:
            return None
        accepted, undecided, mixed = recent
        if mixed:
            leads = self._shared.string_slice(self._n_words, self._sorted_vocab.max_len).leads
            accepted = accepted[leads[accepted] >= 0]
            undecided = undecided[leads[undecided] >= 0]
            if undecided.shape[0] > _SLICE_WALK_MAX_UNDECIDED:
                return None  # (the chart walk of the usual trie is shorter)
        if len(self._slice_walks) >= _SLICE_WALKS_KEPT:
            del self._slice_walks[next(iter(self._slice_walks))]
        # [runs of the accepted, undecided, their bitset and number once asked for]
        self._slice_walks[key] = [_runs(accepted), undecided.copy(), None]
        return accepted, undecided, None

    def _slice_dfa_walk(
        self,
        s: int,
        context: tuple,
        deadline: int = 0,
        max_sets: int = SLICE_WALK_SETS,
        slice_key: tuple | None = None,
        ahead: tuple | None = None,
        grouped_only: bool = False,
    ) -> tuple[np.ndarray | None, int, np.ndarray, np.ndarray] | None:
        """:meth:`_walk`'s result for state ``s`` (in ``context``) with the JSON string
        slice's tokens read by its rule and the rules it calls, without a chart
        (``kernels.slice_dfa_walk``, remembering the steps of ``max_sets`` pair sets); the
        chart walks only the tokens outside the slice and those left undecided. None when
        the state cannot be walked that way or leaves too many undecided. With
        ``slice_key`` (:meth:`_slice_walk_key`), the slice tokens are kept for the states
        that walk alike. With ``ahead`` (see :meth:`_class_of`), a walk of the whole trie
        takes the later requests' states along (:meth:`_walk_ahead`). With
        ``grouped_only``, only a grouped walk on a trie built already (else None)."""
        sv = self._sorted_vocab
        automaton, slice_bytes, _ = self._slice_walk_inputs()
        whole = self._shared.string_slice(self._n_words, sv.max_len)
        follow, followed = self._slice_follow(s, context)
        acc = np.empty(len(sv), dtype=np.int32)
        unk = np.empty(len(sv), dtype=np.int32)
        n_classes = int(self._automaton_arrays[layout.A_N_CLASSES])
        sets = new_slice_walk_sets(sv.max_len, n_classes, max_sets)
        frames = np.empty((2, SLICE_WALK_FRAMES + 1), dtype=np.int32)
        clock = np.zeros(2, dtype=np.int64)
        walked = None
        # (the walks taken along use the usual table of pair sets; a context enters a slice
        # walk only through ``followed``)
        joint = max_sets == SLICE_WALK_SETS
        if joint:  # walked along with an earlier request's state
            found = self._walked_ahead.pop((s, followed), None)
            if found is not None:
                walked, acc, unk = found
        if walked is None and grouped_only:
            walked = self._grouped_slice_walk(
                s, follow, followed, acc, unk, sets, frames, deadline, build=False
            )
            if walked is None:
                return None
        found = None
        if walked is None and joint and ahead:
            # with states ahead, a grouped trie is walked only when built (a build costs more
            # than the joint walk's share of a state)
            walked = self._grouped_slice_walk(
                s, follow, followed, acc, unk, sets, frames, deadline, build=False
            )
            if walked is None:
                found = self._walk_ahead(s, followed, ahead, deadline, slice_key)
                if found is not None:
                    walked, acc, unk = found
        if walked is None:
            walked = self._grouped_slice_walk(s, follow, followed, acc, unk, sets, frames, deadline)
        if walked is None:
            started = time.thread_time_ns()
            walked = slice_dfa_walk(
                automaton,
                followed,
                follow,
                s,
                sv.trie,
                whole.leads,
                self._loops(),
                acc,
                unk,
                _SLICE_WALK_MAX_UNDECIDED,
                sets,
                frames,
                clock,
                deadline,
            )
            if walked[0] == 0 and time.thread_time_ns() - started >= _GROUPED_AFTER_NS:
                # a walk that cost about a build: the next of its grouping walks grouped
                grouping = self._slice_grouping(s, follow, followed)
                if grouping is not None:
                    self._shared.note_grouping(grouping[0])
        st, n_acc, n_unk = walked
        if st == layout.TIMEOUT:
            raise DeadlineExceededError
        if st < 0 or n_unk > _SLICE_WALK_MAX_UNDECIDED:  # the usual walk is shorter
            return None
        if slice_key is not None:  # (the buffers are this walk's own)
            self._remember_slice_walk(slice_key, acc[:n_acc], unk[:n_unk], False)
        return self._with_rest(s, context, acc[:n_acc], unk[:n_unk], deadline)

    def _walk_ahead(
        self, s: int, followed: int, ahead: tuple, deadline: int, slice_key: tuple | None
    ) -> tuple | None:
        """The slice walk of state ``s`` with ``followed`` (``slice_dfa_walk``'s (status,
        n_acc, n_unk), acc, unk), done in one pass with those of the states of the requests
        ``ahead`` (``(requests, i)``, see :meth:`_class_of`) that may need one: unclassified
        plain states that may read string text, and context keys classified in their context
        (no own class to refine), but those whose slice walk keys (:meth:`_slice_walk_key`)
        equal ``s``'s (``slice_key``), another's taken along or one whose tokens are kept:
        they take the kept tokens. Their walks are kept for their own classification
        (``_walked_ahead``, by state and ``followed``, the context's only part in a slice
        walk). None when there are none, or when the pass gives up.

        A state taken along may turn out to need no slice walk (its own checks decide it
        first): its share of the pass is wasted, a fraction of a walk of its own. (A joint
        walk notes no byte grouping: it already shares the trie's reading.)"""
        requests, i = ahead
        seeds: list[tuple[int, int]] = [(s, followed)]
        keys = {slice_key}
        state_class = self._state_class
        while i < len(requests) and len(seeds) < _JOINT_WALK_STATES:
            t = requests[i]
            if t < 0:  # a context key: s, m, the chain, the top-level callers
                key = tuple(requests[i + 1 : i - t])
                i -= t
                t = key[0]
                own = _own_class(int(state_class[t]))
                if key in self._contexts or (
                    own >= 0 and self._cls_meta[own, 4] <= REFINE_MAX_UNCERTAIN
                ):
                    continue  # classified, or refined from its own class
                context = self._context_of(t, key[1:])
            else:
                i += 1
                if state_class[t] != UNCLASSIFIED or not self._reads_string_text(t):
                    continue
                context = self._context_of(t, ())
            seed = (t, self._slice_follow(t, context)[1])
            if seed in seeds or seed in self._walked_ahead:
                continue
            key = self._slice_walk_key(t, self._scratch, context)
            if key is not None and (
                key in keys or key in self._slice_walks or key in self._recent_walks
            ):
                continue
            keys.add(key)
            seeds.append(seed)
        for t in self._context_first_ahead:  # asked in context next (see classify_states)
            if len(seeds) >= _JOINT_WALK_STATES:
                break
            seed = (t, 0)
            if seed in seeds or seed in self._walked_ahead:
                continue
            key = self._slice_walk_key(t, self._scratch, self._context_of(t, ()))
            if key is not None and (
                key in keys or key in self._slice_walks or key in self._recent_walks
            ):
                continue
            keys.add(key)
            seeds.append(seed)
        if len(seeds) == 1:
            return None
        walks = self._joint_slice_walks([t for t, _ in seeds], deadline, [f for _, f in seeds])
        found = walks.pop((s, followed), None)
        self._walked_ahead.update(walks)
        return found

    def _joint_slice_walks(
        self, states: list[int], deadline: int = 0, followed: list[int] | None = None
    ) -> dict[tuple[int, int], tuple]:
        """``{(state, followed): ((status, n_acc, n_unk), acc, unk)}``:
        ``kernels.slice_dfa_walk`` of each of ``states`` (the usual table of pair sets) with
        its ``followed`` (:meth:`_slice_follow`; None: each state's without a context), in
        one pass over the trie (``kernels.multi_slice_dfa_walk``); empty when that pass
        gives up.

        Raises
        ------
        DeadlineExceededError
            The monotonic clock passed ``deadline`` (nanoseconds, 0: none).
        """
        sv = self._sorted_vocab
        automaton = self._slice_walk_inputs()[0]
        whole = self._shared.string_slice(self._n_words, sv.max_len)
        k = len(states)
        follow = np.zeros((k, 256), dtype=np.uint8)
        follows = np.zeros(k, dtype=np.int64)
        for w, t in enumerate(states):
            follow[w], follows[w] = self._slice_follow(t, self._context_of(t, ()))
        if followed is not None:
            follows[:] = followed
        n_classes = int(self._automaton_arrays[layout.A_N_CLASSES])
        sets, frames = new_multi_sets(k, sv.max_len, n_classes)
        status, acc, unk, out = multi_slice_dfa_walk(
            automaton,
            follows,
            follow,
            np.array(states, dtype=np.int64),
            sv.trie,
            whole.leads,
            self._loops(),
            _SLICE_WALK_MAX_UNDECIDED,
            sets,
            frames,
            _JOINT_WALK_PRODUCTS,
            np.zeros(2, dtype=np.int64),
            deadline,
        )
        if status == layout.TIMEOUT:
            raise DeadlineExceededError
        if status != 0:  # (a state's table of pair sets, or the tuples', is full)
            return {}
        return {
            (t, int(follows[w])): ((int(out[w, 0]), int(out[w, 1]), int(out[w, 2])), acc[w], unk[w])
            for w, t in enumerate(states)
        }

    def _grouped_slice_walk(
        self,
        s: int,
        follow: np.ndarray,
        followed: int,
        acc: np.ndarray,
        unk: np.ndarray,
        sets: tuple,
        frames: np.ndarray,
        deadline: int = 0,
        build: bool = True,
    ) -> tuple[int, int, int] | None:
        """``kernels.slice_dfa_walk``'s outcome for state ``s`` from a walk of the
        vocabulary's trie with the bytes grouped as that walk tells them apart
        (``kernels._slice_groups``: a few thousand nodes for a long bounded string, against
        some 280k), or None where the bytes are not grouped (too many states to compare or
        groups), the grouping's trie is not built (no walk of it read much of the trie yet,
        see :meth:`_slice_dfa_walk`; or, without ``build``, not built yet), the walk meets
        more pair sets than ``sets`` holds or leaves the state undecided."""
        grouping = self._slice_grouping(s, follow, followed)
        if grouping is None:
            return None
        group, n_groups, rep_class, rep_follow = grouping
        grouped = self._shared.grouped_trie(group, n_groups, build)
        if grouped is None:
            return None
        sv = self._sorted_vocab
        st, n_acc, n_unk = grouped_slice_walk(
            self._slice_walk_inputs()[0],
            followed,
            s,
            grouped,
            rep_class,
            rep_follow,
            self._shared.string_slice(self._n_words, sv.max_len).leads,
            self._loops(),
            acc,
            unk,
            _SLICE_WALK_MAX_UNDECIDED,
            sets,
            frames,
            np.empty(grouped[0].shape[0], dtype=np.int32),
            np.zeros(2, dtype=np.int64),
            deadline,
        )
        if st < 0 and st != layout.TIMEOUT:
            # SLICE_GROUPS_FULL, or undecided: the slice walk may still decide it (its
            # byte-loop shortcut, which reads a looping state's subtree whole, is not here);
            # else the chart would walk the whole trie
            return None
        return st, n_acc, n_unk

    def _slice_grouping(self, s: int, follow: np.ndarray, followed: int) -> tuple | None:
        """(byte groups, their number, a class and the follow flag of each) of the slice
        bytes for a slice walk from ``s`` (``kernels.slice_byte_groups``), or None where
        too many states would be compared or there are more than _MAX_GROUPS groups. The
        last grouping of the rule (and whether a slice byte may follow it) serves every
        state it found (their walks meet no other state): the later positions of a string."""
        rule = int(self._state_rule[s])
        key = (rule, followed > 0)
        kept = self._slice_groupings.get(key)
        if kept is not None:
            found = kept[0]
            at = int(np.searchsorted(found, s))
            if at < found.shape[0] and found[at] == s:
                return kept[1]
        automaton, slice_bytes, _ = self._slice_walk_inputs()
        n_classes = int(self._automaton_arrays[layout.A_N_CLASSES])
        group = np.empty(256, dtype=np.int32)
        rep_class = np.empty(256, dtype=np.int32)
        rep_follow = np.empty(256, dtype=np.uint8)
        queue = np.empty(self._n_states, dtype=np.int32)
        n_groups, n_found = slice_byte_groups(
            automaton,
            s,
            slice_bytes,
            follow,
            followed,
            np.zeros(self._n_states, dtype=np.int8),
            queue,
            np.empty(2 * n_classes + 2, dtype=np.uint64),
            np.empty(n_classes, dtype=np.int32),
            group,
            rep_class,
            rep_follow,
            _GROUP_MAX_WORK,
            _MAX_GROUPS,
        )
        if n_groups < 0 and n_groups != SLICE_TOO_MANY_GROUPS:  # too many states
            return None
        grouping = None
        if 0 <= n_groups <= _MAX_GROUPS:
            grouping = (group, n_groups, rep_class[:n_groups].copy(), rep_follow[:n_groups].copy())
        self._slice_groupings[key] = (np.sort(queue[:n_found]), grouping)
        return grouping

    def _with_rest(
        self,
        s: int,
        context: tuple,
        acc: np.ndarray | None,
        unk: np.ndarray,
        deadline: int = 0,
        base: tuple | None = None,
    ) -> tuple[np.ndarray | None, int, np.ndarray, np.ndarray]:
        """:meth:`_slice_dfa_walk`'s result from the slice tokens its kernel accepted
        (``acc``, sorted positions; or None and ``base``: their read-only token bitset and
        number, at least a bitset's words) and left undecided (``unk``): the chart walks the
        tokens outside the slice and the undecided ones. The accepted positions it returns
        are all of them only when no bitset is returned (a short list); with a bitset, only
        those outside the slice."""
        sv = self._sorted_vocab
        rest, trie = self._rest_trie(unk)
        states, n_top, _, _, follow = context
        walked = classify(
            self._packed,
            s,
            follow,
            trie,
            rest.shape[0],
            sv.max_len,
            0,
            states,
            n_top,
            deadline,
        )
        assert walked is not None  # no budget
        extra = rest[walked[0]]
        uncertain = rest[walked[1]]
        if base is None:
            if acc.shape[0] + extra.shape[0] < self._n_words:  # stored as a list
                accepted = _merged(acc, extra)
                return None, accepted.shape[0], accepted, uncertain
            bits = positions_to_bitset(sv.token_ids, acc, self._n_words, NO_BASE)
            base = (read_only(bits), acc.shape[0])
        # (the slice's accepted tokens and those outside it are disjoint)
        bitset = positions_to_bitset(sv.token_ids, extra, self._n_words, base[0])
        return bitset, base[1] + extra.shape[0], extra, uncertain

    def _rest_trie(self, unk: np.ndarray) -> tuple[np.ndarray, tuple]:
        """(sorted positions, trie) of the tokens outside the JSON string slice and the
        slice tokens ``unk`` (sorted) that a slice walk left undecided. The last one built
        is kept: the copies of a string in a union's branches come one after the other in
        a mask's requests, with the same undecided tokens (a build: up to a millisecond)."""
        whole = self._shared.string_slice(self._n_words, self._sorted_vocab.max_len)
        if not unk.shape[0]:
            return whole.outside, whole.outside_trie
        last = self._last_rest
        if last is not None and np.array_equal(last[0], unk):
            return last[1], last[2]
        rest = _merged(whole.outside, unk)
        trie = self._sorted_vocab.subset_trie(rest)
        self._last_rest = (unk.copy(), rest, trie)
        return rest, trie

    def _slice_walk_inputs(self) -> tuple:
        """(the automaton's arrays for ``kernels.slice_dfa_walk``, bool [256] the bytes of
        slice text, uint8 [n_classes] the byte classes that hold a slice byte), made on
        first need."""
        if self._slice_walk_arrays is None:
            sv = self._sorted_vocab
            whole = self._shared.string_slice(self._n_words, sv.max_len)
            slice_bytes = (whole.dfa >= 0).any(axis=0)
            a = self._automaton_arrays
            text_classes = np.zeros(int(a[layout.A_N_CLASSES]), dtype=np.uint8)
            text_classes[a[layout.A_BYTE_CLASS][slice_bytes]] = 1
            self._slice_walk_arrays = (
                # read-only views: one kernel specialization for built and deserialized grammars
                tuple(read_only(x.view()) if isinstance(x, np.ndarray) else x for x in a),
                slice_bytes,
                text_classes,
            )
        return self._slice_walk_arrays

    def _slice_follow(self, s: int, context: tuple) -> tuple[np.ndarray, int]:
        """(uint8 [256] the slice bytes that may follow ``s``'s rule, ``followed``) for
        ``kernels.slice_dfa_walk``."""
        slice_bytes = self._slice_walk_inputs()[1]
        # where a slice byte may follow the rule, a token that ends it may go on in a caller
        follow = self._rule_follow[self._state_rule[s]] & slice_bytes
        followed = int(follow.any())
        if followed and context[0].shape[0]:  # in a context, the walk reads on into the callers
            followed = 2
        return follow, followed

    def _slice_walk_key(self, s: int, scratch: list, context: tuple) -> tuple | None:
        """A key of what ``kernels.slice_dfa_walk`` reads for state ``s`` (in ``context``):
        states with equal keys accept and leave undecided the same slice tokens. It is the
        signature of ``s`` (``kernels.state_signature``) in the automaton without the
        transitions that no slice byte takes (a slice token reads slice bytes only: states
        whose windows differ only past the others, such as the closing quote of a string
        inlined into a rule that goes on with the next key, walk the slice alike), with the
        slice bytes that may follow its rule and ``followed`` (the context enters the slice
        walk only there). None when the window holds more than _SLICE_KEY_CAP states.
        Kept during a classify_states call (:meth:`_walk_ahead` asks it of the states ahead)."""
        follow, followed = self._slice_follow(s, context)
        known = self._slice_keys_ahead.get((s, followed), False)
        if known is not False:
            return known
        if not scratch:
            self._signature_scratch(scratch)
        ok, h0, h1 = state_signature(
            self._packed,
            s,
            _NO_TARGETS,
            _NO_TARGETS,
            follow,
            self._slice_walk_inputs()[2],
            self._sorted_vocab.max_len,
            _SLICE_KEY_CAP,
            self._shared.key0,
            self._shared.key1,
            *scratch,
        )
        key = (int(h0), int(h1), followed) if ok else None
        self._slice_keys_ahead[(s, followed)] = key
        return key

    def _add_context(self, key: tuple[int, ...], cid: int, grown: bool) -> None:
        """Store class ``cid`` for the context key ``(s, m, chain.., callers..)`` in the table
        after the states in ``state_class`` (lock held). The entry is written before the
        slot that points to it, so kernels see it whole or not at all."""
        self._contexts[key] = cid
        words = _context_entry(key, cid)
        n = self._n_states
        sc = self._state_class
        if sc.shape[0] > n:
            cap, used = int(sc[n]), int(sc[n + 1])
            pool = n + 2 + cap
            if 2 * len(self._contexts) <= cap and pool + used + len(words) <= sc.shape[0]:
                sc[pool + used : pool + used + len(words)] = words
                sc[n + 1] = used + len(words)
                sc[n + 2 + _context_slot(sc, n, cap, words[:-1])] = used + 1
                if grown:
                    self._publish()
                return
        self._rebuild_contexts()

    def _rebuild_contexts(self) -> None:
        """Re-allocate ``state_class`` with a context table holding every context, with room
        to grow, and publish it (lock held; old snapshots keep the old array)."""
        cap = 64
        while cap < 4 * len(self._contexts):
            cap *= 2
        entries = [_context_entry(k, c) for k, c in self._contexts.items()]
        used = sum(len(e) for e in entries)
        n = self._n_states
        bigger = np.zeros(n + 2 + cap + max(1024, 2 * used), dtype=np.int32)
        bigger[:n] = self._state_class[:n]
        bigger[n], bigger[n + 1] = cap, used
        pool = n + 2 + cap
        at = 0
        for e in entries:
            bigger[pool + at : pool + at + len(e)] = e
            bigger[n + 2 + _context_slot(bigger, n, cap, e[:-1])] = at + 1
            at += len(e)
        self._state_class = bigger
        self._publish()

    def _assign(self, s: int, cid: int, grown: bool) -> None:
        # Called with the lock held; the class is complete, so publishing its id is last.
        if self._state_class[s] == CONTEXT_FIRST:
            cid = CONTEXT_FIRST - 1 - cid  # keeps the mark (see own_classes)
        if grown:
            # Old snapshots keep their own state_class, whose ids fit their arrays.
            self._state_class = self._state_class.copy()
            self._state_class[s] = cid
            self._publish()
        else:
            self._state_class[s] = cid

    def _insert(self, key: bytes, kind, payload, uncertain) -> tuple[int, bool]:
        """Class id of ``key``, appending the class if it is new; (cid, reallocated)."""
        cid = self._index.get(key)
        if cid is not None:
            return cid, False
        if payload is None:
            raise KeyError("MaskStore.insert_classes: a new class digest comes without payload")
        cid = self._n_classes
        grown = False
        if cid >= self._cls_meta.shape[0]:
            grown = True
            bigger = np.zeros((2 * cid, 5), dtype=np.int64)
            bigger[:cid] = self._cls_meta
            self._cls_meta = bigger
        acc_off, g1 = self._acc.append(payload)
        unc_off, g2 = self._unc.append(uncertain)
        self._cls_meta[cid] = (kind, acc_off, payload.shape[0], unc_off, uncertain.shape[0])
        self._n_classes += 1
        self._index[key] = cid
        return cid, grown or g1 or g2
