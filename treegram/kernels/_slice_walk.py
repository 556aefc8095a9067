"""The JSON string slice's tokens read by one rule and the rules it calls, without a chart.

A state inside a string whose text is constrained (a pattern, a key that is none of the
declared names, a length bound) does not contain the whole slice (``kernels._slices``), so
its classification walked the whole trie through the Earley chart: a hundred milliseconds
or more per state for about 280k trie nodes. But a slice token cannot end the state's rule
and go on in a caller unless a slice byte may follow the rule (its follow set is ``"`` and
the like), so the token is ACCEPTED exactly when the rule, with the calls it makes on the
way, reads all of its bytes, and REJECTED otherwise. The walk keeps, per trie depth, the
few (state, return frame) pairs that the rule and the rules it calls can be in (a frame is
a call in progress: the state it returns to and the frame that state is in): a few
transitions per trie node, tens of times cheaper than a chart step, and one transition
while the rule is in a single state that calls nothing. Only the tokens outside the slice
(their own small trie) and the ones the walk cannot decide (too many pairs or frames, or,
where a slice byte may follow the rule, a path that goes on past a state where the rule
may end) need the chart. A step depends only on the pair set and the byte's class, so the walk
remembers each set's steps (a DFA over pair sets, built as the walk meets them): at most
nodes a step is a table read, which halves a wide string DFA's walk (tail calls from rule
to rule, one per character).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._layout import NOT_COUNTED, TIMEOUT, AutomatonArrays
from ._slices import fill_loop_off, loops_below

# (state, frame) pairs a trie depth may hold; a node with more is left undecided (the
# start of a string of a wide oneOf holds one pair per alternative and the rules each
# calls; a step is computed once per pair set, so a wide set costs little)
MAX_PAIRS = 32
# frames of calls inside called rules a walk may make; a call from the state's own rule
# needs none: its frame is _direct(return state)
MAX_FRAMES = 64
_UNDECIDED = -1  # _closure / _add: the walk cannot decide the subtree
_IN_RULE = -1  # the frame of a pair in the classified state's own rule
# a row of the pairs scratch: MAX_PAIRS states, then their frames, then the count, then
# whether a pair of the rule may end there
_FRAMES = MAX_PAIRS
_COUNT = 2 * MAX_PAIRS
_ENDS = 2 * MAX_PAIRS + 1
_LOOPS = 2 * MAX_PAIRS + 2  # whether a pair's state moves back to itself on some byte
PAIR_ROW = 2 * MAX_PAIRS + 3
# distinct pair sets a walk remembers the byte-class steps of (a lazily built DFA over
# them); rows after these are per-depth scratch for sets met once the table is full
MAX_SETS = 1024
# a step's outcome in the table: not computed yet, nothing reads the byte, undecided
_UNKNOWN = -2
_DEAD = -1
_UNDECIDED_SET = -3
# the frames scratch: row 0 the return states, row 1 the parent frames; [0, MAX_FRAMES] the
# number made
_RET, _PARENT = 0, 1
# a subtree of fewer tokens is walked as usual: the loop check would cost more than it saves
_LOOP_MIN_TOKENS = 8
_NO_TOKENS = np.zeros(2, dtype=np.int32)  # the token sets of the bundle: none ([0, 0])
_NO_CHARS = np.zeros(0, dtype=np.int32)  # its character bounds: none (no text to count)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _direct(ret):
    """The frame of a call made in the state's own rule, returning to ``ret`` (and from
    there on in the rule): a negative number below _IN_RULE, no table entry."""
    return -2 - ret


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _add(pairs, d, n, s, f):
    """Append pair (s, f) to depth ``d`` unless present; the new count, or _UNDECIDED."""
    for j in range(n):
        if pairs[d, j] == s and pairs[d, _FRAMES + j] == f:
            return n
    if n == MAX_PAIRS:
        return _UNDECIDED
    pairs[d, n] = s
    pairs[d, _FRAMES + n] = f
    return n + 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _frame(frames, ret, parent):
    """The frame of a call that returns to state ``ret`` in frame ``parent``: _direct(ret)
    from the state's own rule, else a table entry made once per walk (_UNDECIDED when the
    walk has made MAX_FRAMES)."""
    if parent == _IN_RULE:
        return _direct(ret)
    n = frames[0, MAX_FRAMES]
    for f in range(n):
        if frames[_RET, f] == ret and frames[_PARENT, f] == parent:
            return f
    if n == MAX_FRAMES:
        return _UNDECIDED
    frames[_RET, n] = ret
    frames[_PARENT, n] = parent
    frames[0, MAX_FRAMES] = n + 1
    return n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _closure(A, pairs, frames, d, n):
    """Calls and returns of the pairs at depth ``d`` (the first ``n``), to a fixpoint: a
    pair that calls a rule adds the rule's start in a frame returning to the call's
    target (and the target itself when the rule is nullable); a pair in a called rule that
    may end returns into its frame. The new count, or _UNDECIDED (too many pairs or
    frames)."""
    j = 0
    while j < n:
        s = pairs[d, j]
        f = pairs[d, _FRAMES + j]
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            r = A.ref_rule[e]
            g = _frame(frames, A.ref_target[e], f)
            if g == _UNDECIDED:
                return g
            n = _add(pairs, d, n, A.rule_start[r], g)
            if n < 0:
                return n
            if A.rule_nullable[r]:
                n = _add(pairs, d, n, A.ref_target[e], f)
                if n < 0:
                    return n
        if f != _IN_RULE and A.state_final[s]:
            if f < _IN_RULE:  # a call from the rule returns into it
                n = _add(pairs, d, n, -2 - f, _IN_RULE)
            else:
                n = _add(pairs, d, n, frames[_RET, f], frames[_PARENT, f])
            if n < 0:
                return n
        j += 1
    return n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _sort_row(rows, r, n):
    """Sort the ``n`` pairs of row ``r`` by (state, frame): one form per set."""
    for i in range(1, n):
        s = rows[r, i]
        f = rows[r, _FRAMES + i]
        j = i - 1
        while j >= 0 and (rows[r, j] > s or (rows[r, j] == s and rows[r, _FRAMES + j] > f)):
            rows[r, j + 1] = rows[r, j]
            rows[r, _FRAMES + j + 1] = rows[r, _FRAMES + j]
            j -= 1
        rows[r, j + 1] = s
        rows[r, _FRAMES + j + 1] = f


@njit(nogil=True, cache=True, _nrt=False)
def _intern(rows, slots, nxt, n_classes, r, n, n_sets):
    """The id of the sorted set of ``n`` pairs in row ``r``: a stored set's, or a new one's
    (its row copied, its steps unknown); ``r`` itself when the table (``slots.shape[0] //
    2`` sets) is full. Returns (id, new number of sets)."""
    h = np.uint64(n)
    for j in range(n):
        h = (h ^ np.uint64(rows[r, j])) * np.uint64(0x100000001B3)
        h = (h ^ np.uint64(rows[r, _FRAMES + j] + 64)) * np.uint64(0x100000001B3)
    mask = slots.shape[0] - 1
    slot = np.int64(h ^ (h >> np.uint64(29))) & mask
    while slots[slot] >= 0:
        i = slots[slot]
        if rows[i, _COUNT] == n:
            same = True
            for j in range(n):
                if rows[i, j] != rows[r, j] or rows[i, _FRAMES + j] != rows[r, _FRAMES + j]:
                    same = False
                    break
            if same:
                return i, n_sets
        slot = (slot + 1) & mask
    if n_sets == slots.shape[0] // 2:
        return r, n_sets
    for j in range(PAIR_ROW):
        rows[n_sets, j] = rows[r, j]
    for c in range(n_classes):
        nxt[n_sets * n_classes + c] = _UNKNOWN
    slots[slot] = n_sets
    return n_sets, n_sets + 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _finish(A, rows, r, n, loop_off, loop_known):
    """Sort row ``r``'s ``n`` pairs and note its count, whether a pair of the classified
    state's own rule may end there, and whether a pair's state loops on some byte (its
    off-loop bytes filled in on first need, ``fill_loop_off``)."""
    _sort_row(rows, r, n)
    rows[r, _COUNT] = n
    ends = 0
    loops = 0
    for j in range(n):
        x = rows[r, j]
        if rows[r, _FRAMES + j] == _IN_RULE and A.state_final[x]:
            ends = 1
        if loop_known[x] == 0:
            fill_loop_off(loop_off, x, A.byte_class, A.n_classes, A.trans)
            loop_known[x] = 1
        for w in range(4):
            if loop_off[x, w] != ~np.uint64(0):
                loops = 1
    rows[r, _ENDS] = ends
    rows[r, _LOOPS] = loops


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def seed_set(A, rows, frames, slots, nxt, state, followed, loop_off, loop_known):
    """Clear the set table and intern the walk's first set: ``state`` and its closure.
    Returns ``(j, n_sets)``; ``j`` is ``_UNDECIDED_SET`` when the state cannot be walked
    this way (its closure overflows, or, with ``followed`` 2, its rule may end before any
    byte), and ``j >= scratch`` (half the table) when the table is full."""
    frames[0, MAX_FRAMES] = 0
    for q in range(slots.shape[0]):
        slots[q] = -1
    scratch = slots.shape[0] // 2
    rows[scratch, 0] = state
    rows[scratch, _FRAMES] = _IN_RULE
    n = _closure(A, rows, frames, scratch, 1)
    if n < 0:
        return _UNDECIDED_SET, 0
    if followed == 2:
        for j in range(n):
            if rows[scratch, _FRAMES + j] == _IN_RULE and A.state_final[rows[scratch, j]]:
                return _UNDECIDED_SET, 0
    _finish(A, rows, scratch, n, loop_off, loop_known)
    return _intern(rows, slots, nxt, A.n_classes, scratch, n, 0)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def step_set(A, rows, frames, slots, nxt, i, c, r, n_sets, loop_off, loop_known):
    """The pair set that set ``i`` reaches on byte class ``c``, built in scratch row ``r``:
    its pairs' transitions, then calls and returns. Returns ``(j, n_sets)``: ``_DEAD`` when
    nothing reads the byte, ``_UNDECIDED_SET`` when the set overflows its row, else the
    interned set (a new one counted in ``n_sets``; ``j >= r`` when the table is full)."""
    n = 0
    for q in range(rows[i, _COUNT]):
        t = A.trans[rows[i, q] * A.n_classes + c]
        if t >= 0:
            n = _add(rows, r, n, t, rows[i, _FRAMES + q])
            if n < 0:
                break
    if n > 0:
        n = _closure(A, rows, frames, r, n)
    if n == 0:
        return _DEAD, n_sets
    if n < 0:
        return _UNDECIDED_SET, n_sets
    _finish(A, rows, r, n, loop_off, loop_known)
    return _intern(rows, slots, nxt, A.n_classes, r, n, n_sets)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _slice_tokens(leads, lo, hi, out, n):
    """Append the slice tokens among sorted positions ``lo..hi-1`` to ``out`` after its
    first ``n``; returns the new count."""
    for p in range(lo, hi):
        if leads[p] >= 0:
            out[n] = p
            n += 1
    return n


@njit(nogil=True, cache=True, _nrt=False)
def slice_dfa_walk(
    arrays,
    followed,
    follow,
    state,
    trie,
    leads,
    loops,
    acc,
    unk,
    max_unk,
    sets,
    frames,
    clock,
    deadline,
):
    """Classify the slice tokens (``leads >= 0``) of the token trie for ``state``.

    Parameters
    ----------
    arrays : tuple
        The automaton's arrays (``Automaton.arrays()``: the fields of
        ``kernels._layout.AutomatonArrays`` but the token sets, which the walk never reads).
    followed : int
        0: no slice byte may follow the state's rule. 1: one may, so a path that reads on
        past a state where the rule may end is left undecided. 2: the same, in a context
        (the walk reads on into the callers), so where the rule may end before the first
        byte the whole state is left to the chart.
    follow : uint8 [256]
        The slice bytes that may follow the state's rule (its LL(1) follow set, in any
        context): where the rule may end, only the subtrees whose next byte is one of them
        are left undecided; a path that ends the rule dies on any other byte, so the rule's
        own pairs decide those subtrees alone (a rule that may end after most characters,
        the regex of a ``format: regex`` string, left nearly every token to the chart).
    state : int
        The state to classify.
    trie : tuple
        The whole vocabulary's token trie (``kernels._trie``), in sorted-token order.
    leads : int32 [n_tokens]
        Per sorted token, its characters in the slice, -1 outside it (``StringSlice.leads``).
    loops : tuple
        (the bytes below each trie node, per automaton state the bytes it does not move back
        to itself on, which of those are known): a pair whose state loops on every byte
        below a node reads its whole subtree (``classify``'s byte loops).
    acc, unk : int32 [n_tokens]
        Receive, in increasing order, the positions of the slice tokens read whole
        (ACCEPTED) and of those left undecided (for the chart). Every other slice token is
        REJECTED; tokens outside the slice are left to the caller.
    max_unk : int
        Stop with _UNDECIDED as soon as more than this many tokens are left undecided (the
        caller then walks the chart anyway: the rest of this walk would be wasted).
    sets : tuple
        Scratch (``new_sets``): the (state, frame) pair sets the walk meets (a row each: the
        pairs, their count, whether the rule may end; the rows after the table's are one
        per trie depth, for sets met once it is full), the set each byte class steps
        each one to, a hash table of the rows, and the set at each trie depth. A step
        depends on its pair set and byte class alone, so one computed once (the pairs'
        transitions, then their calls and returns) is a table read at every other node
        that steps the same set by the same class: a DFA over pair sets, built lazily.
    frames : int32 [2, MAX_FRAMES + 1]
        Scratch: the return frames the walk makes (``frames[0, MAX_FRAMES]`` is set to 0
        here).
    clock : int64 [2]
        The clock's scratch.
    deadline : int
        Monotonic nanoseconds (0: none), checked every 4,096 nodes.

    Returns
    -------
    (int, int, int)
        (status, n_acc, n_unk): status 0; TIMEOUT; or _UNDECIDED when the state itself
        cannot be walked this way or leaves more than ``max_unk`` undecided.
    """
    A = AutomatonArrays(*arrays, _NO_TOKENS, 0, _NO_CHARS, NOT_COUNTED)
    n_classes = A.n_classes
    byte_class = A.byte_class
    rows, nxt, slots, sid = sets
    node_byte, node_depth, node_end, node_first, node_tok_lo, node_tok_hi = trie
    suffix_bits, loop_off, loop_known = loops
    scratch = slots.shape[0] // 2  # row scratch + d: the depth-d set once the table is full
    first, n_sets = seed_set(A, rows, frames, slots, nxt, state, followed, loop_off, loop_known)
    if first == _UNDECIDED_SET:
        return _UNDECIDED, 0, 0
    sid[0] = first
    n_acc = 0
    n_unk = 0
    n_nodes = node_byte.shape[0]
    k = 0
    steps = 0
    while k < n_nodes:
        steps += 1
        if deadline > 0 and (steps & 4095) == 0 and monotonic_ns(clock) > deadline:
            return TIMEOUT, 0, 0
        d = node_depth[k]
        c = byte_class[node_byte[k]]
        i = sid[d - 1]
        if followed > 0 and d > 1 and rows[i, _ENDS] and follow[node_byte[k]]:
            # the rule may have ended before this byte and a caller read it: the chart decides
            # (not before the first byte: the chart's own items for the callers cover that)
            n_unk = _slice_tokens(leads, node_first[k], node_first[node_end[k]], unk, n_unk)
            if n_unk > max_unk:
                return _UNDECIDED, 0, 0
            k = node_end[k]
            continue
        j = _UNKNOWN
        if i < scratch:
            j = nxt[i * n_classes + c]
        if j == _UNKNOWN:
            j, n_sets = step_set(
                A, rows, frames, slots, nxt, i, c, scratch + d, n_sets, loop_off, loop_known
            )
            if i < scratch and j < scratch:  # (a scratch row is not remembered)
                nxt[i * n_classes + c] = j
        if j == _DEAD:  # nothing reads this byte: the subtree's slice tokens fail
            k = node_end[k]
            continue
        first_deeper = node_first[k]  # the node's own tokens come first in its subtree
        if j >= 0:
            sid[d] = j
            if rows[j, _LOOPS] and node_first[node_end[k]] - node_first[k] >= _LOOP_MIN_TOKENS:
                looping = False
                for q in range(rows[j, _COUNT]):
                    if loops_below(suffix_bits, k, loop_off, rows[j, q]):
                        looping = True
                        break
                if looping:  # every token below is read staying in that state
                    n_acc = _slice_tokens(leads, node_first[k], node_first[node_end[k]], acc, n_acc)
                    k = node_end[k]
                    continue
            n_acc = _slice_tokens(leads, node_tok_lo[k], node_tok_hi[k], acc, n_acc)
            k += 1  # (where the rule may end here, the children check the byte they read)
            continue
        # left to the chart
        n_unk = _slice_tokens(leads, first_deeper, node_first[node_end[k]], unk, n_unk)
        if n_unk > max_unk:
            return _UNDECIDED, 0, 0
        k = node_end[k]
    return 0, n_acc, n_unk


def new_sets(max_token_len: int, n_classes: int, max_sets: int = MAX_SETS) -> tuple:
    """Scratch ``sets`` for ``slice_dfa_walk`` that remembers at most ``max_sets`` pair sets
    (uninitialised: the walk sets what it reads)."""
    return (
        np.empty((max_sets + max_token_len + 1, PAIR_ROW), dtype=np.int32),
        np.empty(max_sets * n_classes, dtype=np.int32),
        np.empty(2 * max_sets, dtype=np.int32),
        np.empty(max_token_len + 1, dtype=np.int32),
    )
