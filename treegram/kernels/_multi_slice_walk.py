"""``slice_dfa_walk`` of several states in one pass over the token trie.

The branches of a union of strings (``oneOf`` of unanchored patterns, a ``format: regex``
string in two places) are several live states of one mask, each walked over the whole
trie (about 280k nodes, 3-4 ms apiece). Each state keeps its own pair set table and frames
(``kernels._slice_walk``'s scratch) and steps as its own walk would; the walk itself moves
over the trie once with the tuple of the states' pair sets, interned as a *product* with a
table of its steps by byte (a DFA over the tuples, built lazily as ``slice_dfa_walk``
builds one over pair sets): a trie node costs one table read whatever the number of
states. A state whose own walk would leave a subtree (dead, undecided, read whole through a
byte loop) keeps that verdict in its slot of the tuple for the whole subtree, and a
subtree where no state walks on is skipped, and so is one that every byte below steps from
its product back to itself (each state's verdict holds through it). Each token notes the
product at its node, and one pass over the tokens per state at the end gives each state its
accepted and undecided tokens, in increasing order: ``slice_dfa_walk``'s outcome.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._layout import NOT_COUNTED, TIMEOUT, AutomatonArrays
from ._slice_walk import (
    _COUNT,
    _DEAD,
    _ENDS,
    _LOOP_MIN_TOKENS,
    _LOOPS,
    _NO_CHARS,
    _NO_TOKENS,
    _UNDECIDED,
    _UNDECIDED_SET,
    _UNKNOWN,
    MAX_FRAMES,
    MAX_SETS,
    PAIR_ROW,
    seed_set,
    step_set,
)
from ._slices import loops_below

# the joint walk gave up (a state's table of pair sets is full, so its sets hold only along
# one trie path, or the tuples outnumber the product table): walk each state alone
JOINT_GAVE_UP = -8
# a state's slot of a product: its pair set (>= 0), or its verdict on the subtree
_S_DEAD = -1  # REJECTED (nothing reads the byte, or the state could not be walked)
_S_UNDECIDED = -3  # left to the chart
_S_ALL = -4  # ACCEPTED: read whole through a byte loop
# product flags
_F_LIVE = 1  # some state walks on below
_F_LOOPS = 2  # some state's pair set loops on some byte


@njit(nogil=True, cache=True, inline="always")
def _intern(tup, k, comp, flags, nxt, slots, n_prod, rows):
    """The id of the product ``tup`` (``k`` slots): a stored one's, or a new one's (its
    steps unknown, its flags set), or -1 when the table is full. Returns (id, n_prod)."""
    h = np.uint64(0xCBF29CE484222325)
    for w in range(k):
        h = (h ^ np.uint64(tup[w] + 8)) * np.uint64(0x100000001B3)
    mask = slots.shape[0] - 1
    slot = np.int64(h ^ (h >> np.uint64(29))) & mask
    while slots[slot] >= 0:
        i = slots[slot]
        same = True
        for w in range(k):
            if comp[i, w] != tup[w]:
                same = False
                break
        if same:
            return i, n_prod
        slot = (slot + 1) & mask
    if n_prod == comp.shape[0]:
        return -1, n_prod
    f = 0
    for w in range(k):
        j = tup[w]
        comp[n_prod, w] = j
        if j >= 0:
            f |= _F_LIVE
            if rows[w, j, _LOOPS]:
                f |= _F_LOOPS
    flags[n_prod] = f
    for b in range(256):
        nxt[n_prod * 256 + b] = _UNKNOWN
    slots[slot] = n_prod
    return n_prod, n_prod + 1


@njit(nogil=True, cache=True, inline="always")
def _fixed_below(suffix_bits, i, fixed, q):
    """Whether every byte below trie node ``i`` steps product ``q`` back to itself (its
    bits in ``fixed[q]``, set as the walk learns those steps)."""
    return (
        (suffix_bits[i, 0] & ~fixed[q, 0]) == 0
        and (suffix_bits[i, 1] & ~fixed[q, 1]) == 0
        and (suffix_bits[i, 2] & ~fixed[q, 2]) == 0
        and (suffix_bits[i, 3] & ~fixed[q, 3]) == 0
    )


@njit(nogil=True, cache=True)
def multi_slice_dfa_walk(
    arrays,
    followed,
    follow,
    states,
    trie,
    leads,
    loops,
    max_unk,
    sets,
    frames,
    max_products,
    clock,
    deadline,
):
    """``slice_dfa_walk`` of each of ``states`` in one pass over the trie.

    Parameters
    ----------
    arrays, trie, leads, loops, max_unk, clock, deadline
        As ``slice_dfa_walk`` takes them.
    followed : int64 [k]
        Each state's ``followed``.
    follow : uint8 [k, 256]
        Each state's ``follow``.
    states : int64 [k]
        The states to classify.
    sets : tuple
        ``new_multi_sets``: a ``slice_dfa_walk`` scratch per state (each array one more
        axis, the first).
    frames : int32 [k, 2, MAX_FRAMES + 1]
        A ``slice_dfa_walk`` frames scratch per state.
    max_products : int
        The tuples of pair sets the walk may meet (a power of two).

    Returns
    -------
    (int, int32 [k, n_tokens], int32 [k, n_tokens], int64 [k, 3])
        (status, acc, unk, out): status 0, TIMEOUT or JOINT_GAVE_UP; row i of ``acc`` and
        ``unk`` state i's accepted and undecided slice tokens, and row i of ``out`` its
        ``slice_dfa_walk`` outcome (status, n_acc, n_unk; status 0 or _UNDECIDED).
    """
    A = AutomatonArrays(*arrays, _NO_TOKENS, 0, _NO_CHARS, NOT_COUNTED)
    n_classes = A.n_classes
    byte_class = A.byte_class
    rows, nxt, slots, _ = sets
    node_byte, node_depth, node_end, node_first, node_tok_lo, node_tok_hi = trie
    suffix_bits, loop_off, loop_known = loops
    k = states.shape[0]
    n_tokens = leads.shape[0]
    scratch = slots.shape[1] // 2
    out = np.zeros((k, 3), dtype=np.int64)
    acc = np.empty((k, n_tokens), dtype=np.int32)
    unk = np.empty((k, n_tokens), dtype=np.int32)
    n_sets = np.zeros(k, dtype=np.int64)
    comp = np.empty((max_products, k), dtype=np.int32)
    flags = np.empty(max_products, dtype=np.uint8)
    pnext = np.empty(max_products * 256, dtype=np.int32)
    pslots = np.full(2 * max_products, -1, dtype=np.int32)
    tup = np.empty(k, dtype=np.int32)
    # the bytes on which each product steps back to itself (below the first byte)
    fixed = np.zeros((max_products, 4), dtype=np.uint64)
    # product 0: every state dead (what a token outside every walk keeps)
    for w in range(k):
        tup[w] = _S_DEAD
    _, n_prod = _intern(tup, k, comp, flags, pnext, pslots, np.int64(0), rows)
    token_prod = np.zeros(n_tokens, dtype=np.int32)
    for w in range(k):
        first, n_w = seed_set(
            A,
            rows[w],
            frames[w],
            slots[w],
            nxt[w],
            states[w],
            followed[w],
            loop_off,
            loop_known,
        )
        n_sets[w] = n_w
        if first == _UNDECIDED_SET:
            out[w, 0] = _UNDECIDED
            tup[w] = _S_DEAD
        elif first >= scratch:
            return JOINT_GAVE_UP, acc, unk, out
        else:
            tup[w] = first
    pid = np.empty(sets[3].shape[1], dtype=np.int32)  # the product at each trie depth
    q, n_prod = _intern(tup, k, comp, flags, pnext, pslots, n_prod, rows)
    pid[0] = q
    n_nodes = node_byte.shape[0]
    i = 0
    steps = 0
    while i < n_nodes:
        steps += 1
        if deadline > 0 and (steps & 4095) == 0 and monotonic_ns(clock) > deadline:
            return TIMEOUT, acc, unk, out
        d = node_depth[i]
        b = node_byte[i]
        p = pid[d - 1]
        q = _UNKNOWN
        if d > 1:  # (the first byte skips the end check: the table holds the others)
            q = pnext[p * 256 + b]
        if q == _UNKNOWN:
            c = byte_class[b]
            for w in range(k):
                j = comp[p, w]
                if j < 0:
                    tup[w] = j
                    continue
                if followed[w] > 0 and d > 1 and rows[w, j, _ENDS] and follow[w, b]:
                    # the rule may have ended before this byte and a caller read it
                    tup[w] = _S_UNDECIDED
                    continue
                t = nxt[w, j * n_classes + c]
                if t == _UNKNOWN:
                    t, n_w = step_set(
                        A,
                        rows[w],
                        frames[w],
                        slots[w],
                        nxt[w],
                        j,
                        c,
                        scratch + d,
                        n_sets[w],
                        loop_off,
                        loop_known,
                    )
                    n_sets[w] = n_w
                    if t >= scratch:  # (a set of one trie path only)
                        return JOINT_GAVE_UP, acc, unk, out
                    nxt[w, j * n_classes + c] = t
                if t == _DEAD:
                    tup[w] = _S_DEAD
                elif t < 0:
                    tup[w] = _S_UNDECIDED
                else:
                    tup[w] = t
            q, n_prod = _intern(tup, k, comp, flags, pnext, pslots, n_prod, rows)
            if q < 0:
                return JOINT_GAVE_UP, acc, unk, out
            if d > 1:
                pnext[p * 256 + b] = q
                if q == p:
                    fixed[q, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        # (the subtree's token range is read only where a branch needs it: a far read)
        if flags[q] & _F_LOOPS and node_first[node_end[i]] - node_first[i] >= _LOOP_MIN_TOKENS:
            # a state whose pair set loops on every byte below reads the subtree whole
            changed = False
            for w in range(k):
                j = comp[q, w]
                tup[w] = j
                if j >= 0 and rows[w, j, _LOOPS]:
                    for x in range(rows[w, j, _COUNT]):
                        if loops_below(suffix_bits, i, loop_off, rows[w, j, x]):
                            tup[w] = _S_ALL
                            changed = True
                            break
            if changed:
                q, n_prod = _intern(tup, k, comp, flags, pnext, pslots, n_prod, rows)
                if q < 0:
                    return JOINT_GAVE_UP, acc, unk, out
        live = flags[q] & _F_LIVE
        if live and node_end[i] > i + 1 and _fixed_below(suffix_bits, i, fixed, q):
            # every node below has product q (or, past a byte loop's check, one with a
            # state's pair set read whole: ACCEPTED either way), so its tokens take q's
            # verdicts (the text of two format: regex strings, Github_hard---o53084: 7%
            # of their joint walk)
            live = 0
        if live:
            for t in range(node_tok_lo[i], node_tok_hi[i]):
                token_prod[t] = q
            pid[d] = q
            i += 1
        else:  # no state walks on: every token below takes the verdicts
            if q != 0:
                for t in range(node_first[i], node_first[node_end[i]]):
                    token_prod[t] = q
            i = node_end[i]
    for t in range(n_tokens):
        if leads[t] < 0:  # (not a slice token: no state's)
            token_prod[t] = 0
    # each state's tokens, in increasing order: one pass per state, writing one row at a
    # time, with each product's verdict for it looked up (1 ACCEPTED, 2 undecided)
    verdict = np.zeros(n_prod, dtype=np.uint8)
    for w in range(k):
        for q in range(n_prod):
            j = comp[q, w]
            verdict[q] = 1 if j >= 0 or j == _S_ALL else (2 if j == _S_UNDECIDED else 0)
        acc_w = acc[w]
        unk_w = unk[w]
        n_acc = 0
        n_unk = 0
        for t in range(n_tokens):
            v = verdict[token_prod[t]]
            if v == 1:
                acc_w[n_acc] = t
                n_acc += 1
            elif v == 2:
                unk_w[n_unk] = t
                n_unk += 1
        out[w, 1] = n_acc
        out[w, 2] = n_unk
    for w in range(k):
        if out[w, 2] > max_unk:
            out[w, 0] = _UNDECIDED
    return 0, acc, unk, out


def new_multi_sets(n_states: int, max_token_len: int, n_classes: int) -> tuple:
    """Scratch ``(sets, frames)`` for ``multi_slice_dfa_walk`` of ``n_states`` states:
    ``slice_dfa_walk``'s (``new_sets`` with MAX_SETS), one per state."""
    return (
        (
            np.empty((n_states, MAX_SETS + max_token_len + 1, PAIR_ROW), dtype=np.int32),
            np.empty((n_states, MAX_SETS * n_classes), dtype=np.int32),
            np.empty((n_states, 2 * MAX_SETS), dtype=np.int32),
            np.empty((n_states, max_token_len + 1), dtype=np.int32),
        ),
        np.empty((n_states, 2, MAX_FRAMES + 1), dtype=np.int32),
    )
